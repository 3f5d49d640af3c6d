package mail_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/mail"
	"github.com/sluice-dev/sluice/internal/testkit"
)

func sender(t *testing.T, addr, mode string) *mail.Sender {
	t.Helper()
	s, err := mail.New(mail.Config{Addr: addr, From: "sluice@example.com", TLS: mode, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestALinkMessageReachesTheRecipientWithItsLinkTenantAndExpiry(t *testing.T) {
	srv := testkit.StartSMTP(t, "")
	expires := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	link := "https://sluice.example/invite?token=" + strings.Repeat("ab", 32)
	msg := mail.LinkMessage(mail.LinkInvite, "new@acme.example", "acme", "viewer", link, expires)
	if err := sender(t, srv.Addr, mail.TLSPlain).Send(context.Background(), msg); err != nil {
		t.Fatalf("send: %v", err)
	}
	got := srv.Messages()
	if len(got) != 1 || got[0].From != "sluice@example.com" || len(got[0].To) != 1 || got[0].To[0] != "new@acme.example" {
		t.Fatalf("received %+v", got)
	}
	for _, want := range []string{"To: new@acme.example\r\n", "From: sluice@example.com\r\n", "Subject: ", link + "\r\n", "acme", "as viewer", "Wed, 2 Jan 2030 03:04 UTC"} {
		if !strings.Contains(got[0].Data, want) {
			t.Errorf("the message lacks %q:\n%s", want, got[0].Data)
		}
	}
}

func TestStartTLSIsRequiredUnlessPlainIsAllowed(t *testing.T) {
	srv := testkit.StartSMTP(t, "")
	msg := mail.Message{To: "a@example.com", Subject: "s", Body: "b"}
	err := sender(t, srv.Addr, mail.TLSStartTLS).Send(context.Background(), msg)
	if err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("a server without STARTTLS: %v, want a refusal naming STARTTLS", err)
	}
	if n := len(srv.Messages()); n != 0 {
		t.Fatalf("%d messages went in the clear", n)
	}
}

func TestAFailingServerIsAnError(t *testing.T) {
	msg := mail.Message{To: "a@example.com", Subject: "s", Body: "b"}
	refused := testkit.StartSMTP(t, "554 5.7.1 relay denied")
	if err := sender(t, refused.Addr, mail.TLSPlain).Send(context.Background(), msg); err == nil || !strings.Contains(err.Error(), "relay denied") {
		t.Fatalf("a 5xx reply: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	if err := sender(t, closed, mail.TLSPlain).Send(context.Background(), msg); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("connection refused: %v", err)
	}
}

func TestHeaderInjectionIsRefused(t *testing.T) {
	srv := testkit.StartSMTP(t, "")
	s := sender(t, srv.Addr, mail.TLSPlain)
	for _, m := range []mail.Message{
		{To: "a@example.com\r\nBcc: evil@example.com", Subject: "s"},
		{To: "a@example.com\nBcc: evil@example.com", Subject: "s"},
		{To: "a@example.com\r\n.evil", Subject: "s"},
		{To: "a@example.com\n", Subject: "s"},
		{To: "a@example.com", Subject: "hi\r\nBcc: evil@example.com"},
		{To: "a@example.com", Subject: "hi\rBcc: evil@example.com"},
		{To: "a@example.com", Subject: "hi\nX: y"},
		{To: "a@example.com", Subject: "nul\x00"},
		{To: "a@example.com, evil@example.com", Subject: "s"},
		{To: "<a@example.com>", Subject: "s"},
	} {
		if err := s.Send(context.Background(), m); err == nil {
			t.Errorf("sent %q / %q", m.To, m.Subject)
		}
		if err := mail.CheckAddress(m.To); strings.ContainsAny(m.To, "\r\n") && err == nil {
			t.Errorf("CheckAddress accepted %q", m.To)
		}
	}
	if n := len(srv.Messages()); n != 0 {
		t.Fatalf("%d messages were sent", n)
	}
	if _, err := mail.New(mail.Config{Addr: srv.Addr, From: "a@example.com\r\nBcc: x@example.com"}); err == nil {
		t.Fatal("a sender address with a line break was accepted")
	}
}

func FuzzHeaderValuesNeverHoldALineBreak(f *testing.F) {
	f.Add("a@example.com", "subject")
	f.Add("a@example.com\r\nBcc: b@example.com", "x")
	f.Add("a@example.com", "x\nBcc: b@example.com")
	f.Fuzz(func(t *testing.T, to, subject string) {
		errTo, errSubject := mail.CheckAddress(to), mail.CheckHeader(subject)
		if strings.ContainsAny(to, "\r\n") && errTo == nil {
			t.Fatalf("address %q accepted", to)
		}
		if strings.ContainsAny(subject, "\r\n") && !errors.Is(errSubject, mail.ErrHeaderInjection) {
			t.Fatalf("subject %q accepted", subject)
		}
	})
}

func TestTLSModesEncryptAndAuthenticate(t *testing.T) {
	for _, implicit := range []bool{false, true} {
		srv, roots := testkit.StartSMTPTLS(t, implicit)
		mode := map[bool]string{false: mail.TLSStartTLS, true: mail.TLSImplicit}[implicit]
		s, err := mail.New(mail.Config{Addr: srv.Addr, From: "sluice@example.com", Username: "sluice", Password: "smtp-secret",
			TLS: mode, RootCAs: roots, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(context.Background(), mail.Message{To: "a@example.com", Subject: "s", Body: "b"}); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		got := srv.Messages()
		if len(got) != 1 || !got[0].TLS || got[0].Auth != "\x00sluice\x00smtp-secret" {
			t.Fatalf("%s: received %+v, want one message over TLS after AUTH PLAIN", mode, got)
		}
		// A certificate the sender does not trust is refused.
		untrusting, _ := mail.New(mail.Config{Addr: srv.Addr, From: "sluice@example.com", TLS: mode, Timeout: 30 * time.Second})
		if err := untrusting.Send(context.Background(), mail.Message{To: "a@example.com", Subject: "s", Body: "b"}); err == nil {
			t.Fatalf("%s: an untrusted certificate was accepted", mode)
		}
	}
}
