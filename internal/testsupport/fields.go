package testsupport

import (
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Fields calls fn for every field of a protobuf message (bytes fields get
// their payload, varints their value, other types are skipped). Malformed
// input fails the test: tests decode packets their code under test built.
func Fields(t testing.TB, b []byte, fn func(num protowire.Number, v uint64, payload []byte)) {
	t.Helper()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag in %x", b)
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				t.Fatal("bad varint")
			}
			fn(num, v, nil)
			b = b[n:]
		case protowire.BytesType:
			p, n := protowire.ConsumeBytes(b)
			if n < 0 {
				t.Fatal("bad bytes")
			}
			fn(num, 0, p)
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				t.Fatal("bad field")
			}
			b = b[n:]
		}
	}
}

// Msg encodes a protobuf message from (field number, value) pairs, for
// tests that hand-build the messages their code under test parses: a
// uint64 is a varint, a float64 a fixed64, a string or []byte
// length-delimited; a value of another type is left out.
func Msg(fields ...any) []byte {
	var b []byte
	for i := 0; i+1 < len(fields); i += 2 {
		n := protowire.Number(fields[i].(int))
		switch v := fields[i+1].(type) {
		case uint64:
			b = protowire.AppendTag(b, n, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		case float64:
			b = protowire.AppendTag(b, n, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, math.Float64bits(v))
		case string:
			b = protowire.AppendTag(b, n, protowire.BytesType)
			b = protowire.AppendString(b, v)
		case []byte:
			b = protowire.AppendTag(b, n, protowire.BytesType)
			b = protowire.AppendBytes(b, v)
		}
	}
	return b
}
