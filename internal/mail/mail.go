// Package mail sends the dashboard's one-time links (invites, password resets) by email through
// an SMTP server, when one is configured (SMTP_ADDR). It speaks SMTP with the standard library's
// net/smtp: STARTTLS required by default, implicit TLS, or plain text only when the operator
// allows it for a local relay. Header values are refused when they hold CR or LF, so that no
// input can add a header or a recipient.
package mail

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/smtp"
	"strings"
	"time"
)

// TLS modes (SMTP_TLS).
const (
	// TLSStartTLS upgrades the connection with STARTTLS and refuses to send when the server does
	// not offer it: credentials and links never cross the network in the clear.
	TLSStartTLS = "starttls"
	// TLSImplicit connects with TLS from the first byte (SMTPS, usually port 465).
	TLSImplicit = "tls"
	// TLSPlain never uses TLS: only for a relay on the same host or a trusted network.
	TLSPlain = "plain"
)

// DefaultTimeout bounds one message's whole conversation with the server.
const DefaultTimeout = 10 * time.Second

// Config is how to reach the SMTP server.
type Config struct {
	Addr               string // host:port
	From               string // the envelope sender and From header, a bare address
	Username, Password string // PLAIN authentication when Username is set
	TLS                string // TLSStartTLS (the default when empty), TLSImplicit or TLSPlain
	Timeout            time.Duration
	// RootCAs verifies the server's certificate; the system's roots when nil.
	RootCAs *x509.CertPool
}

// Sender sends messages through one SMTP server. It is safe for concurrent use: each message is
// one connection.
type Sender struct {
	cfg  Config
	host string
}

// ErrHeaderInjection refuses a header value (an address or a subject) holding CR or LF.
var ErrHeaderInjection = errors.New("mail: header value holds a line break")

// New checks cfg and returns its Sender.
func New(cfg Config) (*Sender, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("mail: SMTP address: %w", err)
	}
	if cfg.TLS == "" {
		cfg.TLS = TLSStartTLS
	}
	switch cfg.TLS {
	case TLSStartTLS, TLSImplicit, TLSPlain:
	default:
		return nil, fmt.Errorf("mail: unknown TLS mode %q", cfg.TLS)
	}
	if err := CheckAddress(cfg.From); err != nil {
		return nil, fmt.Errorf("mail: sender: %w", err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Sender{cfg: cfg, host: host}, nil
}

// CheckHeader refuses a header value holding CR, LF or NUL.
func CheckHeader(v string) error {
	if strings.ContainsAny(v, "\r\n\x00") {
		return ErrHeaderInjection
	}
	return nil
}

// CheckAddress accepts a bare address local@domain with no line break, space, angle bracket or
// comma: what goes into MAIL FROM, RCPT TO and the From and To headers unquoted.
func CheckAddress(a string) error {
	if err := CheckHeader(a); err != nil {
		return err
	}
	at := strings.LastIndexByte(a, '@')
	if at <= 0 || at == len(a)-1 || strings.ContainsAny(a, " \t<>,;:\"()[]\\") || len(a) > 254 {
		return fmt.Errorf("mail: %q is not a bare email address", a)
	}
	return nil
}

// Message is one plain-text email.
type Message struct {
	To, Subject, Body string
}

// compose renders msg as an RFC 5322 message, refusing header injection.
func (s *Sender) compose(msg Message, now time.Time) ([]byte, error) {
	if err := CheckAddress(msg.To); err != nil {
		return nil, fmt.Errorf("mail: recipient: %w", err)
	}
	if err := CheckHeader(msg.Subject); err != nil {
		return nil, fmt.Errorf("mail: subject: %w", err)
	}
	var id [12]byte
	_, _ = rand.Read(id[:])
	domain := s.cfg.From[strings.LastIndexByte(s.cfg.From, '@')+1:]
	var b strings.Builder
	for _, h := range [][2]string{
		{"From", s.cfg.From},
		{"To", msg.To},
		{"Subject", mime.QEncoding.Encode("utf-8", msg.Subject)},
		{"Date", now.Format(time.RFC1123Z)},
		{"Message-ID", "<" + hex.EncodeToString(id[:]) + "@" + domain + ">"},
		{"MIME-Version", "1.0"},
		{"Content-Type", "text/plain; charset=utf-8"},
		{"Content-Transfer-Encoding", "8bit"},
		{"Auto-Submitted", "auto-generated"},
	} {
		b.WriteString(h[0] + ": " + h[1] + "\r\n")
	}
	b.WriteString("\r\n")
	// The body's lines end in CRLF; a line of a lone "." is escaped by net/smtp's DATA writer.
	body := strings.ReplaceAll(strings.ReplaceAll(msg.Body, "\r\n", "\n"), "\r", "\n")
	b.WriteString(strings.ReplaceAll(body, "\n", "\r\n"))
	if !strings.HasSuffix(body, "\n") {
		b.WriteString("\r\n")
	}
	return []byte(b.String()), nil
}

// Send delivers msg within the Sender's timeout (or ctx's deadline, if sooner). Its error says
// what failed (connect, STARTTLS, authentication, a refused recipient) and never holds the body.
func (s *Sender) Send(ctx context.Context, msg Message) error {
	data, err := s.compose(msg, time.Now())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	tlsConf := &tls.Config{ServerName: s.host, MinVersion: tls.VersionTLS12, RootCAs: s.cfg.RootCAs}
	var conn net.Conn
	if s.cfg.TLS == TLSImplicit {
		conn, err = (&tls.Dialer{Config: tlsConf}).DialContext(ctx, "tcp", s.cfg.Addr)
	} else {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", s.cfg.Addr)
	}
	if err != nil {
		return fmt.Errorf("mail: connect to %s: %w", s.cfg.Addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	// Closing the connection when ctx ends unblocks a conversation that a deadline alone would
	// leave to run to its end.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	c, err := smtp.NewClient(conn, s.host)
	if err != nil {
		return fmt.Errorf("mail: greeting from %s: %w", s.cfg.Addr, err)
	}
	defer c.Close()
	if err := c.Hello("localhost"); err != nil {
		return fmt.Errorf("mail: EHLO: %w", err)
	}
	if s.cfg.TLS == TLSStartTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return errors.New("mail: the server does not offer STARTTLS (set SMTP_TLS=plain only for a local relay)")
		}
		if err := c.StartTLS(tlsConf); err != nil {
			return fmt.Errorf("mail: STARTTLS: %w", err)
		}
	}
	if s.cfg.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", s.cfg.Username, s.cfg.Password, s.host)); err != nil {
			return fmt.Errorf("mail: authenticate: %w", err)
		}
	}
	if err := c.Mail(s.cfg.From); err != nil {
		return fmt.Errorf("mail: MAIL FROM: %w", err)
	}
	if err := c.Rcpt(msg.To); err != nil {
		return fmt.Errorf("mail: RCPT TO: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("mail: DATA: %w", err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("mail: write message: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("mail: message refused: %w", err)
	}
	if err := c.Quit(); err != nil {
		return fmt.Errorf("mail: QUIT: %w", err)
	}
	return nil
}
