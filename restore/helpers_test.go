package restore

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The helpers restore_test.go had from package pipeline's tests, where
// they stay for the session tests (service_test.go, protovm_test.go,
// wire_helpers_test.go): the tests moved with the code they test.

// batch stands for the session core's output batch: packets back to back
// and their end offsets.
type batch struct {
	data []byte
	ends []int
}

// restoreAhead is Ahead on a batch, as the core's readback calls it.
func (r *Set) restoreAhead(b *batch, q *Seq, start int, tr tracefile.Trusted) tracefile.Trusted {
	b.data, b.ends, tr = r.Ahead(b.data, b.ends, q, start, tr)
	return tr
}

type tracePacket struct {
	raw  []byte
	info tracefile.PacketInfo
}

// Short names for the tests' hand-built packets.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	return wire.AppendVarint(b, num, v)
}
func appendString(b []byte, num protowire.Number, s string) []byte {
	return wire.AppendString(b, num, s)
}
func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	return wire.AppendBytes(b, num, m)
}

// fields calls fn for every field of a message (bytes fields get their
// payload, varints their value). Malformed input fails the test.
func fields(t *testing.T, b []byte, fn func(num protowire.Number, v uint64, payload []byte)) {
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
