package protovm

import (
	"testing"

	"github.com/tracepipe/tracepipe/internal/wire"
)

// TestReadFieldKeepsProtozeroRules pins the two decoding rules for which
// protovm keeps its own field reader instead of internal/wire's iterator
// (protowire's rules): on each input below Perfetto's ProtoDecoder, and so
// fieldWalk, decodes a field that internal/wire rejects as malformed.
// Callers could express the other protozero rules on top of wire.Iter
// (stop at wire types 3 and 4, skip ids above 0xFFFF); these two they
// cannot, because the iterator stops before returning the field.
func TestReadFieldKeepsProtozeroRules(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []byte
		id   uint32
		val  uint64
	}{
		// 1. A 10-byte varint whose last byte is above 1: protozero keeps
		// the low 64 bits (ParseVarInt shifts the rest out); protowire
		// reports an overflow.
		{"varint past 64 bits", []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 1, 1<<64 - 1},
		// 2. A tag whose field number needs more than 31 bits: protozero
		// truncates the id to 32 bits, skips the field (id > 0xFFFF) and
		// goes on to the next one; protowire rejects the tag.
		{"id above 2^31 skipped", []byte{0x80, 0x80, 0xc0, 0x80, 0x80, 0x01, 0x05, 0x10, 0x07}, 2, 7}, // id 2^32+2^17
	} {
		w := fieldWalk{b: c.in}
		ok := w.next()
		if f := w.f; !ok || f.id != c.id || f.wire != wireVarint || f.val != c.val {
			t.Errorf("%s: fieldWalk = %+v, %v; want field %d = %d", c.name, f, ok, c.id, c.val)
		}
		it := wire.Fields(c.in)
		if it.Next() || it.Malformed() == nil {
			t.Errorf("%s: internal/wire accepts it now (%+v): protovm's reader could sit on it", c.name, *it.Field())
		}
	}
}
