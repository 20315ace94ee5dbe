package tpimport

import (
	"bytes"
	"testing"

	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/tracefile"
)

// BenchmarkCheck measures Check on a synthetic-source-shaped trace (what
// `tracepipe check` and `protovm eval` spend per packet).
func BenchmarkCheck(b *testing.B) {
	pkts := prefix()
	pkts = append(pkts, synthetic())
	for i := range 20000 {
		iid := uint64(i%50 + 1)
		f := []Field{Seq(2), Ts(uint64(1001*ms + i)), Flags(Needs), Event(SliceBegin, 100, iid, Sub(4, String(10, "k"), String(6, "some value")))}
		if i < 50 {
			f = append(f, Interned(EventName(iid, "name")))
		}
		pkts = append(pkts, Packet(f...))
	}
	pkts = append(pkts, Packet(Seq(1), TraceStats(&tracefile.TraceStats{})))
	trace := Trace(pkts...)
	b.SetBytes(int64(len(trace)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := Check(bytes.NewReader(trace), Options{})
		if err != nil || !r.Clean() {
			b.Fatalf("%v %v", err, r.Codes())
		}
	}
}
