package restore

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The helpers restore_test.go had from package pipeline's tests, where
// they stay for the session tests (service_test.go, protovm_test.go): the
// tests moved with the code they test. Its hand-built packets use
// internal/wire directly.

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

// fields calls fn for every field of a message (bytes fields get their
// payload, varints their value). Malformed input fails the test.
func fields(t *testing.T, b []byte, fn func(num protowire.Number, v uint64, payload []byte)) {
	t.Helper()
	testsupport.Fields(t, b, fn)
}
