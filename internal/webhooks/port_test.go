package webhooks

import (
	"context"
	"strconv"
	"testing"

	"github.com/sluice-dev/sluice/internal/apperr"
	"github.com/sluice-dev/sluice/internal/db"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// TestAnEndpointURLWithAnImpossiblePortIsRefusedAsInvalid: url.Parse takes any digits as a
// port; a port that is not 1 to 65535 (0 included), or one written with leading zeros, is
// refused as an invalid url and nothing is stored. A URL without a port, or with a possible
// one, is accepted as it is.
func TestAnEndpointURLWithAnImpossiblePortIsRefusedAsInvalid(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		c := newClock()
		s := newService(t, d, c, false)
		tn := newTenant(t, d, "acme")
		ctx := context.Background()
		for _, raw := range []string{"https://93.184.216.34:99999/h", "https://93.184.216.34:0/h", "https://hooks.example.com:65536/h",
			"http://hooks.example.com:0", "https://hooks.example.com:00443/h", "https://hooks.example.com:0443/h", "https://hooks.example.com:00/h",
			"https://[2606:2800:220:1::]:70000/h", "https://hooks.example.com:18446744073709551617/h"} {
			_, _, err := s.CreateEndpoint(ctx, tn, raw, []string{EventKeyCreated})
			if err == nil {
				t.Errorf("%q: accepted, want invalid_request on url", raw)
			} else if e := apperr.From(err); e.Code != apperr.InvalidRequest || e.Field != "url" {
				t.Errorf("%q: got %v, want invalid_request on url", raw, err)
			}
		}
		if eps, err := s.Endpoints(ctx, tn); err != nil || len(eps) != 0 {
			t.Fatalf("endpoints: %+v, %v; want none", eps, err)
		}
		for _, raw := range []string{"https://93.184.216.34:1/h", "https://93.184.216.34:65535/h", "https://hooks.example.com:8443/h",
			"https://hooks.example.com/h", "https://[2606:2800:220:1::]:443/h", "http://hooks.example.com:10/"} {
			ep, _, err := s.CreateEndpoint(ctx, tn, raw, []string{EventKeyCreated})
			if err != nil {
				t.Errorf("%q: %v", raw, err)
			} else if ep.URL != raw {
				t.Errorf("%q stored as %q", raw, ep.URL)
			}
		}
	})
}

// TestAnEndpointURLWithAnIPv4AddressInAnotherSpellingIsRefused: 127.1, 2130706433, 0x7f.0.0.1,
// 0 and 127.000.000.001 are loopback to a browser and to some clients, and were stored as host
// names that no check before the dial saw as addresses; only four decimal numbers are taken (and
// checked as an address), whatever the operator allows.
func TestAnEndpointURLWithAnIPv4AddressInAnotherSpellingIsRefused(t *testing.T) {
	testkit.Each(t, func(t *testing.T, d *db.DB) {
		for _, allowPrivate := range []bool{false, true} {
			s := newService(t, d, newClock(), allowPrivate)
			tn := newTenant(t, d, "acme-"+strconv.FormatBool(allowPrivate))
			ctx := context.Background()
			for _, raw := range []string{"http://127.1/h", "http://2130706433/h", "http://0x7f.0.0.1/h", "http://0/h", "http://127.000.000.001/h",
				"http://017700000001/h", "https://hooks.example.0x10/h", "http://93.184.216.34.5/h"} {
				_, _, err := s.CreateEndpoint(ctx, tn, raw, []string{EventKeyCreated})
				if e := apperr.From(err); err == nil || e.Code != apperr.InvalidRequest || e.Field != "url" {
					t.Errorf("allowPrivate %v, %q: %v; want invalid_request on url", allowPrivate, raw, err)
				}
			}
			for _, raw := range []string{"https://93.184.216.34/h", "https://hooks9.example.com/h", "https://v4.example.9a/h"} {
				if _, _, err := s.CreateEndpoint(ctx, tn, raw, []string{EventKeyCreated}); err != nil {
					t.Errorf("allowPrivate %v, %q: %v", allowPrivate, raw, err)
				}
			}
		}
	})
}
