package webhooks

import (
	"context"
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
