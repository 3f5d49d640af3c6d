package main

import "testing"

func TestPprofAddrOfGivesEachInstanceItsOwnPort(t *testing.T) {
	for _, c := range []struct {
		base string
		n    int
		want string
	}{
		{"", 0, ""},
		{"", 3, ""},
		{"127.0.0.1:6060", 0, "127.0.0.1:6060"},
		{"127.0.0.1:6060", 2, "127.0.0.1:6062"},
		{"[::1]:6060", 1, "[::1]:6061"},
		{"localhost:65535", 0, "localhost:65535"},
	} {
		got, err := pprofAddrOf(c.base, c.n)
		if err != nil || got != c.want {
			t.Errorf("pprofAddrOf(%q, %d) = %q, %v; want %q", c.base, c.n, got, err, c.want)
		}
	}
	for _, bad := range []string{"6060", "127.0.0.1", "127.0.0.1:x", "127.0.0.1:0", "127.0.0.1:65535:1"} {
		if got, err := pprofAddrOf(bad, 1); err == nil {
			t.Errorf("pprofAddrOf(%q, 1) = %q, want an error", bad, got)
		}
	}
	if got, err := pprofAddrOf("127.0.0.1:65535", 1); err == nil {
		t.Errorf("a port past 65535 was given: %q", got)
	}
}
