package restore

import "github.com/tracepipe/tracepipe/tracefile"

// The helpers restore_test.go had from package pipeline's tests that only
// it uses; the shared ones (a decoded packet, a message's fields) it takes
// from internal/testsupport and tracetest, as pipeline's tests do. Its
// hand-built packets use internal/wire directly.

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
