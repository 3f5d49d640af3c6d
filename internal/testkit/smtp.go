package testkit

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
)

// SMTPMessage is one message a test SMTP server accepted.
type SMTPMessage struct {
	From string
	To   []string
	Data string // as received, dot-unstuffed, lines ending in CRLF
}

// SMTPServer is a minimal SMTP receiver on a loopback port for tests: it speaks EHLO/HELO,
// MAIL, RCPT, DATA, RSET, NOOP and QUIT (no STARTTLS, no AUTH) and keeps what it accepted.
// With Reject set, it answers the end of DATA with that reply (e.g. "554 5.7.1 no") instead of
// accepting the message.
type SMTPServer struct {
	Addr   string
	Reject string

	ln   net.Listener
	mu   sync.Mutex
	msgs []SMTPMessage
	wg   sync.WaitGroup
}

// StartSMTP starts an SMTP receiver, stopped (and its connections waited for) when t ends.
func StartSMTP(t testing.TB, reject string) *SMTPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("test SMTP server: %v", err)
	}
	s := &SMTPServer{Addr: ln.Addr().String(), Reject: reject, ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serve(conn) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

// Messages returns the messages accepted so far.
func (s *SMTPServer) Messages() []SMTPMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SMTPMessage(nil), s.msgs...)
}

func (s *SMTPServer) serve(conn net.Conn) {
	defer conn.Close()
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	reply := func(line string) bool {
		_, err := w.WriteString(line + "\r\n")
		return err == nil && w.Flush() == nil
	}
	if !reply("220 test.invalid ESMTP test") {
		return
	}
	var cur SMTPMessage
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb := strings.ToUpper(line)
		switch {
		case strings.HasPrefix(verb, "EHLO"):
			reply("250-test.invalid\r\n250-8BITMIME\r\n250 SMTPUTF8")
		case strings.HasPrefix(verb, "HELO"), strings.HasPrefix(verb, "NOOP"):
			reply("250 ok")
		case strings.HasPrefix(verb, "RSET"):
			cur = SMTPMessage{}
			reply("250 ok")
		case strings.HasPrefix(verb, "MAIL FROM:"):
			cur = SMTPMessage{From: angle(line[len("MAIL FROM:"):])}
			reply("250 ok")
		case strings.HasPrefix(verb, "RCPT TO:"):
			cur.To = append(cur.To, angle(line[len("RCPT TO:"):]))
			reply("250 ok")
		case verb == "DATA":
			if cur.From == "" || len(cur.To) == 0 {
				reply("503 5.5.1 MAIL and RCPT first")
				continue
			}
			reply("354 go ahead")
			var data strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				data.WriteString(strings.TrimPrefix(l, "."))
			}
			if s.Reject != "" {
				reply(s.Reject)
				cur = SMTPMessage{}
				continue
			}
			cur.Data = data.String()
			s.mu.Lock()
			s.msgs = append(s.msgs, cur)
			s.mu.Unlock()
			cur = SMTPMessage{}
			reply("250 ok queued")
		case verb == "QUIT":
			reply("221 bye")
			return
		default:
			reply("502 5.5.2 not implemented")
		}
	}
}

// angle reads the address of "<a@b> PARAMS".
func angle(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '>'); strings.HasPrefix(s, "<") && i > 0 {
		return s[1:i]
	}
	return s
}
