package envoyrls

import (
	"fmt"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// lenientCodec is gRPC's protobuf codec, except for a RateLimitRequest whose strings are not
// UTF-8. HTTP allows such bytes in header values (obs-text), Envoy copies them into descriptor
// values, and Go's protobuf refuses the whole message (proto3 strings must be UTF-8), which gRPC
// would answer INTERNAL before the service sees it: Envoy lets the request through. So such a
// request is read from its wire format here, keeping the bytes in Go strings; LimitKey escapes
// them, and names that are not UTF-8 (configuration) are refused as invalid as before.
type lenientCodec struct{ encoding.CodecV2 }

func (c lenientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	req, ok := v.(*rls.RateLimitRequest)
	if err == nil || !ok {
		return err
	}
	if lerr := readRequest(data.Materialize(), req); lerr != nil {
		return err // not protobuf either: the codec's own error
	}
	return nil
}

// readRequest reads the fields of a RateLimitRequest the service uses (rls.proto: domain 1,
// descriptors 2, hits_addend 3) into req, skipping the others.
func readRequest(b []byte, req *rls.RateLimitRequest) error {
	proto.Reset(req)
	return readFields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			req.Domain = string(v)
		case num == 2 && typ == protowire.BytesType:
			d, err := readDescriptor(v)
			if err != nil {
				return err
			}
			req.Descriptors = append(req.Descriptors, d)
		case num == 3 && typ == protowire.VarintType:
			req.HitsAddend = uint32(n)
		}
		return nil
	})
}

// readDescriptor reads a RateLimitDescriptor (ratelimit.proto: entries 1, hits_addend 3,
// is_negative_hits 4; the limit override, 2, is ignored by the service).
func readDescriptor(b []byte) (*rlcommon.RateLimitDescriptor, error) {
	d := &rlcommon.RateLimitDescriptor{}
	err := readFields(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e := &rlcommon.RateLimitDescriptor_Entry{}
			err := readFields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					e.Key = string(v)
				case num == 2 && typ == protowire.BytesType:
					e.Value = string(v)
				}
				return nil
			})
			d.Entries = append(d.Entries, e)
			return err
		case num == 3 && typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = &wrapperspb.UInt64Value{}
			}
			// A message field given twice is merged, as protobuf does.
			if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, d.HitsAddend); err != nil {
				return err
			}
		case num == 4 && typ == protowire.VarintType:
			d.IsNegativeHits = n != 0
		}
		return nil
	})
	return d, err
}

// readFields calls f for each field of the message b: its bytes for a length-delimited field, its
// value for a varint; other wire types are skipped.
func readFields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return fmt.Errorf("envoyrls: %w", protowire.ParseError(k))
		}
		b = b[k:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, k = protowire.ConsumeVarint(b)
		default:
			k = protowire.ConsumeFieldValue(num, typ, b)
		}
		if k < 0 {
			return fmt.Errorf("envoyrls: %w", protowire.ParseError(k))
		}
		b = b[k:]
		if err := f(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}
