package tpimport

import (
	"github.com/tracepipe/tracepipe/internal/wire"

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
	it := wire.Fields(b)
	for it.Next() {
		w := it.Field()
		if !fn(field{num: int32(w.Num), typ: w.Type, v: w.Varint, payload: w.Bytes, off: w.Off}) {
			return nil
		}
	}
	return it.Err()
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
