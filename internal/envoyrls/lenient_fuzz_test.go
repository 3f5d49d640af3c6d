package envoyrls

import (
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzReadRequest: readRequest never panics, and where Go's protobuf can decode the bytes too,
// both read the same domain, descriptors (entries, hits_addend, is_negative_hits) and hits_addend.
func FuzzReadRequest(f *testing.F) {
	seed, _ := proto.Marshal(&rls.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}, {Key: "path", Value: "/x"}}, HitsAddend: wrapperspb.UInt64(5)},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "ip", Value: "10.0.0.1"}}, IsNegativeHits: true,
			Limit: &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7}},
	}})
	f.Add(seed)
	f.Add([]byte{0x0a, 0x03, 'a', 'p', 'i', 0x12, 0x0b, 0x0a, 0x09, 0x0a, 0x01, 'u', 0x12, 0x04, 'E', 0xf1, 'a', 'x'})
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var lenient rls.RateLimitRequest
		lerr := readRequest(b, &lenient)
		var strict rls.RateLimitRequest
		if proto.Unmarshal(b, &strict) != nil || lerr != nil {
			return
		}
		if lenient.GetDomain() != strict.GetDomain() || lenient.GetHitsAddend() != strict.GetHitsAddend() ||
			len(lenient.GetDescriptors()) != len(strict.GetDescriptors()) {
			t.Fatalf("lenient %v, strict %v", &lenient, &strict)
		}
		for i, d := range strict.GetDescriptors() {
			l := lenient.GetDescriptors()[i]
			if d.GetIsNegativeHits() != l.GetIsNegativeHits() || (d.GetHitsAddend() == nil) != (l.GetHitsAddend() == nil) ||
				d.GetHitsAddend().GetValue() != l.GetHitsAddend().GetValue() || len(d.GetEntries()) != len(l.GetEntries()) {
				t.Fatalf("descriptor %d: lenient %v, strict %v", i, l, d)
			}
			for j, e := range d.GetEntries() {
				if e.GetKey() != l.GetEntries()[j].GetKey() || e.GetValue() != l.GetEntries()[j].GetValue() {
					t.Fatalf("descriptor %d entry %d: lenient %v, strict %v", i, j, l.GetEntries()[j], e)
				}
			}
		}
	})
}
