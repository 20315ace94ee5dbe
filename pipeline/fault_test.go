package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"

	"github.com/tracepipe/tracepipe/tracefile"
)

var faultRawOnce sync.Once

// faultPlugin builds plugins/internal/faultplugin once per test binary,
// with a second name (faultplugin-raw) beside it.
func faultPlugin(t *testing.T) string {
	t.Helper()
	p := buildPlugin(t, "plugins/internal/faultplugin")
	var err error
	faultRawOnce.Do(func() { err = os.Symlink(p, filepath.Join(filepath.Dir(p), "faultplugin-raw")) })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// faultIndex reads the fault plugin's packet index (TestEvent.seq_value).
func faultIndex(p []byte) (uint32, bool) { return counterIndex(p) }

// Fault containment with real plugin processes: whatever the plugin does,
// the session ends on its own (before the test's deadline), the other data
// source's packets are all there, and the fault is counted in the trace
// and attributed to data_sources[0]: in its TraceStats entry, in the rows
// `tracepipe stats` prints, and in one warning naming it. A plugin that
// dies is noticed at once: the session (whose other source is Finite) ends
// before its duration instead of waiting for it. A plugin process cannot
// run on synctest's clock: TestSessionBoundsWithHungDataSource checks the
// time bound (duration + flush_timeout + the stop bound) with in-process
// hangs.
func TestPluginFaultContainment(t *testing.T) {
	const (
		duration     = 1500 * time.Millisecond
		flushTimeout = time.Second
		goodPackets  = 100
	)
	plugin := faultPlugin(t)
	raw := filepath.Join(filepath.Dir(plugin), "faultplugin-raw")
	// died: modes whose plugin process ends on its own. counted: the
	// attributed counter each mode must raise; these and the start
	// failures are warned about once.
	died := map[string]bool{"kill": true, "panic": true, "exit_start": true}
	counted := map[string]string{"kill": "died", "panic": "died", "spoof": "invalid_packets", "garbage_smb": "smb_chunks_rejected", "bad_commits": "smb_chunks_rejected"}
	for _, tc := range []struct {
		mode   string
		plugin string
		// want checks the outcome: the fault plugin's packets (by index),
		// its attributed stats and the start errors.
		want func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result)
	}{
		{"kill", plugin, func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result) {
			wantAll(t, got, goodPackets) // committed before the crash: kept
			if ps == nil || ps.Died != 1 || !strings.Contains(ps.Error, "killed by signal 9") {
				t.Errorf("attributed stats %+v, want died=1 and the signal", ps)
			}
		}},
		{"panic", plugin, func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result) {
			wantAll(t, got, goodPackets)
			if ps == nil || ps.Died != 1 || !strings.Contains(ps.Error, "exited with status 2") || !strings.Contains(ps.Error, "panic: fault: the data source panicked on purpose") {
				t.Errorf("attributed stats %+v, want died=1, status 2 and the panic line", ps)
			}
		}},
		{"hang_flush", plugin, func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result) {
			wantAll(t, got, goodPackets)
			if res.Stats.FinalFlushOutcome != tracefile.FlushOutcomeFailed {
				t.Errorf("final flush outcome %d, want failed", res.Stats.FinalFlushOutcome)
			}
			if ps == nil || !strings.Contains(ps.Error, "did not stop in time") {
				t.Errorf("attributed stats %+v, want the stop timeout", ps)
			}
		}},
		{"hang_start", plugin, func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result) {
			if len(got) != 0 {
				t.Errorf("%d packets from a plugin that never started", len(got))
			}
			// A Start still hung when the session stops (and through the
			// stop bound) is a start failure, reported as one, not as a
			// data source that did not stop.
			const why = "its Start had not returned 5s after the session stopped"
			want := fmt.Sprintf("data_sources[0] (%s): %s", plugin, why)
			if len(res.StartErrors) != 1 || res.StartErrors[0].Error() != want {
				t.Errorf("start errors %v, want %q", res.StartErrors, want)
			}
			if ps == nil || ps.Error != "start: "+why {
				t.Errorf("attributed stats %+v, want the start failure", ps)
			}
		}},
		{"exit_start", plugin, func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result) {
			want := fmt.Sprintf("data_sources[0] (%s): exited with status 2 during Start: ", plugin)
			if len(res.StartErrors) != 1 || !strings.HasPrefix(res.StartErrors[0].Error(), want) ||
				!strings.Contains(res.StartErrors[0].Error(), "fault: opening /dev/fault0: no such device") ||
				!strings.HasSuffix(res.StartErrors[0].Error(), "fault: giving up") {
				t.Errorf("start errors %v, want %q + the last stderr lines", res.StartErrors, want)
			}
			if ps == nil || !strings.HasPrefix(ps.Error, "start: exited with status 2") {
				t.Errorf("attributed stats %+v, want the start failure", ps)
			}
		}},
		{"spoof", plugin, func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result) {
			for i := uint32(0); i < goodPackets; i++ {
				if want := int(1 - i%2); got[i] != want {
					t.Fatalf("packet %d arrived %d times, want %d (odd ones are spoofed)", i, got[i], want)
				}
			}
			if ps == nil || ps.InvalidPackets != goodPackets/2 || res.Stats.InvalidPackets != goodPackets/2 {
				t.Errorf("attributed stats %+v (total invalid %d), want %d invalid packets", ps, res.Stats.InvalidPackets, goodPackets/2)
			}
		}},
		{"garbage_smb", plugin, func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result) {
			for i, n := range got {
				if n != 1 || i >= goodPackets {
					t.Fatalf("packet %d arrived %d times", i, n)
				}
			}
			if ps == nil || ps.SMBChunksRejected+ps.InvalidPackets == 0 {
				t.Errorf("attributed stats %+v, want rejected chunks or invalid packets", ps)
			}
		}},
		{"bad_commits", raw, func(t *testing.T, got map[uint32]int, ps *tracefile.ProducerStats, res *Result) {
			if ps == nil || ps.SMBChunksRejected < 2 || ps.CommitsMalformed != 1 || ps.SMBChunksRejected+ps.ChunksDiscarded < 3 {
				t.Errorf("attributed stats %+v, want 2+ rejected chunks (out-of-range indices), 1 malformed commit, 3 bad chunks in all", ps)
			}
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "fault.pftrace")
			cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: %v
flush_timeout: %v
write_into_file: true
file_write_period: 200ms
buffers: [{size_kb: 4096}]
data_sources:
  - name: fault.source
    plugin: %q
    config: {mode: %s, packets: %d}
  - name: test.scripted
    config: {writers: 2, packets: 300}
sinks: [{type: file, path: %q}]
`, duration, flushTimeout, tc.plugin, tc.mode, goodPackets, out))
			logged := &testsupport.Messages{}
			s, err := New(cfg, Options{Logger: slog.New(logged)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			start := time.Now()
			res, err := s.Run(ctx)
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: session took %v", tc.mode, elapsed.Round(time.Millisecond))
			if ctx.Err() != nil {
				t.Errorf("the session ran into the test's deadline (%v) instead of ending on its bounds", elapsed)
			}
			if died[tc.mode] && elapsed >= duration {
				t.Errorf("the session took %v: the plugin's death was not noticed before the duration (%v) ended", elapsed, duration)
			}
			label := fmt.Sprintf("data_sources[0] (%s)", tc.plugin)
			warnings := 0 // the service's own lines about the source, not its stderr
			for _, m := range logged.All() {
				if strings.Contains(m, " plugin-host") {
					// go-plugin's copy of a stderr line logged already
					// (a panic came out twice), or of the exit.
					t.Errorf("go-plugin's own log line reached the log: %q", m)
				}
				if strings.HasPrefix(m, label+" sent ") || strings.HasPrefix(m, label+": ") {
					warnings++
				}
			}
			if (counted[tc.mode] != "" || tc.mode == "hang_start" || tc.mode == "exit_start") && warnings != 1 {
				t.Errorf("%d warnings naming %s, want one (log: %q)", warnings, label, logged.All())
			}
			if name := counted[tc.mode]; name != "" {
				found := false
				for _, r := range tracefile.LossReport(res.Stats) {
					if r.Name == label+"."+name && r.Value > 0 && r.Severity == tracefile.SeverityDataLoss {
						found = true
					}
				}
				if !found {
					t.Errorf("tracepipe stats has no data-loss row %s.%s", label, name)
				}
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
			if len(scripted) != 600 {
				t.Errorf("the in-process source's packets: %d of 600", len(scripted))
			}
			var ps *tracefile.ProducerStats
			if tp := res.Stats.Tracepipe; tp != nil {
				for i := range tp.Producers {
					if tp.Producers[i].Index == 0 && tp.Producers[i].Source == tc.plugin {
						ps = &tp.Producers[i]
					} else {
						t.Errorf("a fault attributed to another producer: %+v", tp.Producers[i])
					}
				}
			}
			tc.want(t, got, ps, res)
		})
	}
}

func wantAll(t *testing.T, got map[uint32]int, n int) {
	t.Helper()
	for i := uint32(0); i < uint32(n); i++ {
		if got[i] != 1 {
			t.Fatalf("fault plugin packet %d arrived %d times, want once (all %d were committed before the fault)", i, got[i], n)
		}
	}
}

// restart: {max, backoff} relaunches a plugin that died, on a fresh SMB;
// what each run committed is kept, and each death is attributed.
func TestPluginRestart(t *testing.T) {
	plugin := faultPlugin(t)
	out := filepath.Join(t.TempDir(), "restart.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 3s
flush_timeout: 1s
write_into_file: true
file_write_period: 200ms
buffers: [{size_kb: 4096}]
data_sources:
  - name: fault.source
    plugin: %q
    restart: {max: 2, backoff: 50ms}
    config: {mode: kill, packets: 40}
sinks: [{type: file, path: %q}]
`, plugin, out))
	res := runSession(t, cfg)
	got := map[uint32]int{}
	pids := map[int32]bool{}
	for _, p := range tracetest.ReadTrace(t, out) {
		if i, ok := faultIndex(p.Raw); ok {
			got[i]++
			pids[p.Info.TrustedPID] = true
		}
	}
	for i := uint32(0); i < 40; i++ {
		if got[i] != 3 {
			t.Fatalf("packet %d arrived %d times, want 3 (the first run and 2 restarts)", i, got[i])
		}
	}
	if len(pids) != 3 {
		t.Errorf("packets from %d processes, want 3", len(pids))
	}
	var died uint64
	for _, ps := range res.Stats.Tracepipe.Producers {
		if ps.Index != 0 || ps.Source != plugin {
			t.Errorf("fault attributed to %+v", ps)
		}
		died += ps.Died
	}
	if died != 3 {
		t.Errorf("%d deaths attributed, want 3", died)
	}
}

// A plugin that keeps dying and being restarted holds one SMB, not one per
// run: each dead run's SMB is unmapped (and its memfd closed) once its
// death-time scrape and its queued commits are done, while the session
// goes on. Until then a crash-looping plugin grew the service by an SMB
// and a descriptor per kill (+4 MiB and +1 fd per kill in the chaos soak).
func TestPluginRestartReleasesDeadSMBs(t *testing.T) {
	plugin := faultPlugin(t)
	out := filepath.Join(t.TempDir(), "restart.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 60s
flush_timeout: 1s
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 4096}]
data_sources:
  - name: fault.source
    plugin: %q
    restart: {max: 2, backoff: 50ms}
    config: {mode: kill, packets: 40}
  - name: tracepipe.synthetic # keeps the session recording after the plugin's last death
    config: {writers: 1, rate: 20}
sinks: [{type: file, path: %q}]
`, plugin, out))
	s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type runResult struct {
		res *Result
		err error
	}
	done := make(chan runResult, 1)
	go func() {
		res, err := s.Run(ctx)
		done <- runResult{res, err}
	}()
	// Every run died (3 producers, each with its error) and no SMB is
	// held, while the session is still recording.
	deadline := time.Now().Add(30 * time.Second)
	var last Status
	for {
		last = s.Status()
		dead := 0
		for _, p := range last.Producers {
			if p.DataSourceErrors > 0 {
				dead++
			}
		}
		if dead == 3 && last.Memory.SMBs == int64(cfg.Producers.SMBSizeKB)<<10 { // the synthetic source's
			break
		}
		select {
		case r := <-done:
			t.Fatalf("session ended (err %v) before its 3 dead runs gave their SMBs back; last status: %d producers, SMBs %d bytes", r.err, len(last.Producers), last.Memory.SMBs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 dead runs still hold %d bytes of SMB after 30 s (producers: %+v)", last.Memory.SMBs, last.Producers)
		}
	}
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	// What each run committed is still in the trace.
	got := map[uint32]int{}
	for _, p := range tracetest.ReadTrace(t, out) {
		if i, ok := faultIndex(p.Raw); ok {
			got[i]++
		}
	}
	for i := uint32(0); i < 40; i++ {
		if got[i] != 3 {
			t.Fatalf("packet %d arrived %d times, want 3 (the first run and 2 restarts)", i, got[i])
		}
	}
}
