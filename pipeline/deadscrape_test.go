package pipeline

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
)

// A plugin killed with chunks still in its SMB (complete ones whose
// commits were batched, and a half-written one) loses nothing it finished
// writing, and no loss is counted: the service scrapes the dead SMB once,
// when it notices the death (as traced does when a producer disconnects),
// and never again. Scraping it at every later flush handed the dead
// writer's half-written chunk to the buffer again at the same size; once
// its first copy was read and then erased by the ring wrapping over it
// (here: the restarted plugin's packets), every further copy was counted
// as chunks_discarded, a data-loss counter, once per flush for the rest of
// the session, although no packet was missing. The restarted plugin dies
// the same way, so both dead SMBs hold a half-written chunk.
func TestDeadPluginSMBScrapedOnce(t *testing.T) {
	const packets = 300
	plugin := faultPlugin(t)
	out := filepath.Join(t.TempDir(), "dead.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 2s
flush_timeout: 1s
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 16}]
data_sources:
  - name: fault.source
    plugin: %q
    restart: {max: 1, backoff: 50ms}
    config: {mode: kill_unflushed, packets: %d}
sinks: [{type: file, path: %q}]
`, plugin, packets, out))
	res := runSession(t, cfg)
	got := map[uint32]int{}
	for _, p := range tracetest.ReadTrace(t, out) {
		if i, ok := faultIndex(p.Raw); ok {
			got[i]++
		}
	}
	// Every packet was finished (WritePacket returned): committed, or
	// salvaged from the dead SMB, the last one of each run included (the
	// writer counts the next packet's fragment in advance, so the
	// fragment scraping leaves out is that empty one).
	for i := uint32(0); i < 2*packets; i++ {
		if got[i] != 2 {
			t.Errorf("packet %d arrived %d times, want 2 (a run and its restart)", i, got[i])
		}
	}
	var died uint64
	for _, ps := range res.Stats.Tracepipe.Producers {
		died += ps.Died
	}
	if died != 2 {
		t.Fatalf("%d deaths counted, want 2: the plugin did not die as planned", died)
	}
	if bs := res.Stats.BufferStats[0]; bs.WriteWrapCount == 0 {
		t.Fatalf("the ring never wrapped (%+v): the first run's records were not erased, the test proves nothing", bs)
	}
	bs := res.Stats.BufferStats[0]
	if bs.ChunksDiscarded != 0 || bs.ChunksOverwritten != 0 || bs.AbiViolations != 0 {
		t.Errorf("nothing was lost but the buffer counts chunks_discarded %d, chunks_overwritten %d, abi_violations %d",
			bs.ChunksDiscarded, bs.ChunksOverwritten, bs.AbiViolations)
	}
}
