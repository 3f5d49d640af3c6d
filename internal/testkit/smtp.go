package testkit

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// SMTPMessage is one message a test SMTP server accepted.
type SMTPMessage struct {
	From string
	To   []string
	Data string // as received, dot-unstuffed, lines ending in CRLF
	TLS  bool   // received over TLS
	Auth string // the AUTH PLAIN credentials given before it ("identity\x00user\x00password"), or ""
}

// SMTPServer is a minimal SMTP receiver on a loopback port for tests: it speaks EHLO/HELO,
// MAIL, RCPT, DATA, RSET, NOOP and QUIT and keeps what it accepted; StartSMTPTLS's also speaks
// TLS (STARTTLS, or from the first byte) and, over TLS only, AUTH PLAIN.
// With Reject set, it answers the end of DATA with that reply (e.g. "554 5.7.1 no") instead of
// accepting the message.
type SMTPServer struct {
	Addr   string
	Reject string

	ln       net.Listener
	tls      *tls.Config // nil: no TLS
	implicit bool        // TLS from the first byte
	mu       sync.Mutex
	msgs     []SMTPMessage
	wg       sync.WaitGroup
}

// StartSMTP starts an SMTP receiver, stopped (and its connections waited for) when t ends.
func StartSMTP(t testing.TB, reject string) *SMTPServer {
	t.Helper()
	return startSMTP(t, &SMTPServer{Reject: reject})
}

// StartSMTPTLS starts an SMTP receiver with a certificate for 127.0.0.1 made for the test, and
// returns the pool that trusts it. With implicit, it speaks TLS from the first byte; otherwise
// it offers STARTTLS.
func StartSMTPTLS(t testing.TB, implicit bool) (*SMTPServer, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test SMTP"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	conf := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	return startSMTP(t, &SMTPServer{tls: conf, implicit: implicit}), pool
}

func startSMTP(t testing.TB, s *SMTPServer) *SMTPServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("test SMTP server: %v", err)
	}
	s.Addr, s.ln = ln.Addr().String(), ln
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
	defer func() { _ = conn.Close() }()
	secure := false
	if s.implicit {
		conn, secure = tls.Server(conn, s.tls), true
	}
	r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
	reply := func(line string) bool {
		_, err := w.WriteString(line + "\r\n")
		return err == nil && w.Flush() == nil
	}
	if !reply("220 test.invalid ESMTP test") {
		return
	}
	var cur SMTPMessage
	auth := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb := strings.ToUpper(line)
		switch {
		case strings.HasPrefix(verb, "EHLO"):
			ext := "250-test.invalid\r\n250-8BITMIME\r\n"
			if s.tls != nil && !secure {
				ext += "250-STARTTLS\r\n"
			}
			if secure {
				ext += "250-AUTH PLAIN\r\n"
			}
			reply(ext + "250 SMTPUTF8")
		case verb == "STARTTLS" && s.tls != nil && !secure:
			reply("220 ready")
			tc := tls.Server(conn, s.tls)
			if tc.Handshake() != nil {
				return
			}
			conn, secure, cur, auth = tc, true, SMTPMessage{}, ""
			r, w = bufio.NewReader(conn), bufio.NewWriter(conn)
		case strings.HasPrefix(verb, "AUTH PLAIN ") && secure:
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(line[len("AUTH PLAIN "):]))
			if err != nil {
				reply("501 5.5.2 bad base64")
				continue
			}
			auth = string(b)
			reply("235 2.7.0 ok")
		case strings.HasPrefix(verb, "HELO"), strings.HasPrefix(verb, "NOOP"):
			reply("250 ok")
		case strings.HasPrefix(verb, "RSET"):
			cur = SMTPMessage{}
			reply("250 ok")
		case strings.HasPrefix(verb, "MAIL FROM:"):
			cur = SMTPMessage{From: angle(line[len("MAIL FROM:"):]), TLS: secure, Auth: auth}
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
