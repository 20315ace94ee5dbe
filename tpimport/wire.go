package tpimport

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// field is one decoded protobuf field of a message being walked.
type field struct {
	num     int32
	typ     protowire.Type
	v       uint64 // varint, fixed32 or fixed64 value
	payload []byte // length-delimited payload
	off     int    // offset of the tag in the walked message
}

// walk calls fn for every field of message b, in order. It stops at the
// first malformed field and returns an error naming its offset; fn
// returning false stops the walk early without error.
func walk(b []byte, fn func(f field) bool) error {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return fmt.Errorf("offset %d: tag: %w", off, protowire.ParseError(n))
		}
		f := field{num: int32(num), typ: typ, off: off}
		off += n
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b[off:])
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b[off:])
			f.v = uint64(v)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b[off:])
		case protowire.BytesType:
			f.payload, n = protowire.ConsumeBytes(b[off:])
		default:
			n = protowire.ConsumeFieldValue(num, typ, b[off:])
		}
		if n < 0 {
			return fmt.Errorf("offset %d: field %d: %w", f.off, num, protowire.ParseError(n))
		}
		off += n
		if !fn(f) {
			return nil
		}
	}
	return nil
}

// varints appends the values of a repeated varint field occurrence, packed
// or not.
func varints(dst []uint64, f field) []uint64 {
	switch f.typ {
	case protowire.VarintType:
		return append(dst, f.v)
	case protowire.BytesType:
		b := f.payload
		for len(b) > 0 {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return dst
			}
			dst = append(dst, v)
			b = b[n:]
		}
	}
	return dst
}
