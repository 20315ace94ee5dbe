package pipeline

import (
	"fmt"
	"path/filepath"
	"testing"
	"testing/synctest"

	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/plugins/builtin"
)

// Periodic flushes scrape chunks the writers are still filling; their
// real commits arrive later, bigger. The trace must still hold every
// packet exactly once, in order, with no ABI violation counted.
func TestServicePeriodicFlushScrapesWithoutLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "flush.pftrace")
		res := runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 1s
write_into_file: true
file_write_period: 100ms
flush_period: 100ms
buffers: [{size_kb: 4096}]
data_sources:
  - name: tracepipe.synthetic
    config: {writers: 2, rate: 3000, packet_size: 300, counter_every: 0}
sinks: [{type: file, path: %q}]
`, out)))
		pkts := tracetest.ReadTrace(t, out)
		next := map[uint32]uint64{}
		for _, p := range pkts {
			if p.Info.SequenceID < 2 {
				continue
			}
			seq, ok := builtin.SyntheticSeq(p.Raw)
			if !ok {
				continue // track descriptors carry no index
			}
			if want := next[p.Info.SequenceID]; seq != want {
				t.Fatalf("sequence %d: packet %d after %d (lost or duplicated around a scrape)", p.Info.SequenceID, seq, want-1)
			}
			next[p.Info.SequenceID] = seq + 1
		}
		if len(next) != 2 {
			t.Fatalf("%d sequences", len(next))
		}
		for id, n := range next {
			if n < 500 {
				t.Errorf("sequence %d: only %d packets in 1 s at 3000/s", id, n)
			}
		}
		st := res.Stats
		if st.FlushesSucceeded < 5 || st.FlushesFailed != 0 {
			t.Errorf("flushes: %d succeeded, %d failed", st.FlushesSucceeded, st.FlushesFailed)
		}
		if bs := st.BufferStats[0]; bs.AbiViolations != 0 || bs.ChunksOverwritten != 0 || bs.ChunksDiscarded != 0 {
			t.Errorf("buffer stats %+v", bs)
		}
		t.Logf("flushes %d, out-of-order commits %d, rewritten %d", st.FlushesSucceeded, st.BufferStats[0].ChunksCommittedOutOfOrder, st.BufferStats[0].ChunksRewritten)
	})
}
