package hostname

import "testing"

func TestEndsInANumber(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1": true, "0x7f.0.0.1": true, "2130706433": true, "0": true, "a.0x": true, "a.0X1F": true,
		"example.com.1": true, "127.0.0.1.": true,
		"example.com": false, "v4.example.9a": false, "0x7g": false, "a1": false, "1a": false, "": false, "localhost": false,
	} {
		if got := EndsInANumber(host); got != want {
			t.Errorf("EndsInANumber(%q) = %v, want %v", host, got, want)
		}
	}
}
