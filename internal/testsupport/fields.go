package testsupport

import (
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
