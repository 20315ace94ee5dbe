package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

// plugins.Finite with a real plugin process beside an in-process source,
// as in the fault-containment tests: a session without a duration ends
// once both are done, within flush_timeout + the stop bound of that, with
// every packet of both and nothing counted as lost or attributed.
func TestPluginFiniteEndsSessionWithOthers(t *testing.T) {
	const (
		flushTimeout = time.Second
		teardown     = time.Second
		packets      = 100
	)
	bound := flushTimeout + stopTimeout + teardown
	plugin := faultPlugin(t)
	out := filepath.Join(t.TempDir(), "finite.pftrace")
	s, err := New(cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 0s
flush_timeout: %v
write_into_file: true
file_write_period: 200ms
buffers: [{size_kb: 4096}]
data_sources:
  - name: fault.source
    plugin: %q
    config: {mode: ok, packets: %d}
  - name: test.scripted
    config: {writers: 2, packets: 300}
sinks: [{type: file, path: %q}]
`, flushTimeout, plugin, packets, out)), Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Only the data sources' ends can stop this session before ctx does.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	res, err := s.Run(ctx)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the session ran until its context ended: the plugin's Done did not end it")
	}
	// Both sources write their packets at once; the rest is the final
	// flush and the stop.
	t.Logf("session took %v (bound %v)", elapsed.Round(time.Millisecond), bound)
	if elapsed > bound {
		t.Errorf("the session took %v after its sources were done, more than flush_timeout + stop bound = %v", elapsed, bound)
	}
	got := map[uint32]int{}
	scripted := map[[2]int]bool{}
	for _, p := range tracetest.ReadTrace(t, out) {
		if w, i, _, ok := tracetest.ScriptedID(p.Raw); ok && p.Info.TrustedPID == int32(os.Getpid()) {
			scripted[[2]int{w, i}] = true
			continue
		}
		if i, ok := faultIndex(p.Raw); ok {
			got[i]++
		}
	}
	wantAll(t, got, packets)
	if len(got) != packets {
		t.Errorf("%d distinct plugin packets, want %d", len(got), packets)
	}
	if len(scripted) != 600 {
		t.Errorf("the in-process source's packets: %d of 600", len(scripted))
	}
	st := res.Stats
	if st.FinalFlushOutcome != tracefile.FlushOutcomeSucceeded {
		t.Errorf("final flush outcome %d, want succeeded", st.FinalFlushOutcome)
	}
	for _, r := range tracefile.LossReport(st) {
		if r.Severity == tracefile.SeverityDataLoss && r.Value != 0 {
			t.Errorf("loss counted in a lossless session: %s[%d] = %d", r.Name, r.Index, r.Value)
		}
	}
}
