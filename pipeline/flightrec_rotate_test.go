package pipeline

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// rotate_period rotates a streaming session's file on time: every file
// after the first starts with the preamble a max_file_size rotation gives
// it (clock snapshot first) and every file but the last ends with a
// TraceStats. (tracepipe check reports unresolved_iid in rotated files of
// the synthetic source for max_file_size rotation too: a limit of the
// file sink's fold, not of the timer.)
func TestRotatePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "rot.pftrace")
		cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 2500ms
write_into_file: true
file_write_period: 100ms
rotate_period: 1s
buffers: [{size_kb: 1024}]
data_sources:
  - name: tracepipe.synthetic
    config: {writers: 2, rate: 500, packet_size: 64}
sinks: [{type: file, path: %q}]
`, out))
		res := runSession(t, cfg)
		// On synctest's clock: rotations at 1 s and 2 s of a 2.5 s session.
		if len(res.Files) != 3 {
			t.Fatalf("files %v; want a rotation per second (3 files)", res.Files)
		}
		for i, f := range res.Files {
			pkts := tracetest.ReadTrace(t, f)
			if len(pkts) == 0 || pkts[0].Info.PayloadField != tracefile.FieldClockSnapshot {
				t.Fatalf("%s does not start with a clock snapshot", f)
			}
			if i < len(res.Files)-1 {
				if _, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1].Raw); !ok || err != nil {
					t.Fatalf("%s does not end with a TraceStats", f)
				}
			}
			rep, err := tpimport.CheckFile(f, tpimport.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d packets, check %v", f, len(pkts), rep.Codes())
		}
	})
}

// A ring-buffer session (write_into_file false) writes its files only at
// stop: rotation before then has nothing to close, and must not leave a
// file holding a lone TraceStats without its service packets (`tracepipe
// rotate` on configs/flight_recorder.yaml left an 84-byte first file:
// check's missing_clock_snapshot). Rotate says why nothing rotated.
func TestRotateBeforeDataKeepsTheFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "ring.pftrace")
		cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 2500ms
write_into_file: false
rotate_period: 1s
buffers: [{size_kb: 1024}]
data_sources:
  - name: tracepipe.synthetic
    config: {writers: 2, rate: 500, packet_size: 64}
sinks: [{type: file, path: %q}]
`, out))
		svc, err := New(cfg, Options{Logger: testsupport.Logger(t), Rotatable: true})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan *Result, 1)
		go func() {
			res, err := svc.Run(t.Context())
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		synctest.Wait()
		closed, err := svc.Rotate()
		if !errors.Is(err, sinks.ErrNothingToRotate) || len(closed) != 0 || !strings.Contains(err.Error(), "write_into_file is false") {
			t.Errorf("Rotate before any write = %v, %v; want ErrNothingToRotate saying why", closed, err)
		}
		res := <-done
		if len(res.Files) != 1 {
			t.Fatalf("files %v; want one (no rotation before the ring is written)", res.Files)
		}
		rep, err := tpimport.CheckFile(res.Files[0], tpimport.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Clean() {
			t.Errorf("%s: findings %v", res.Files[0], rep.Codes())
		}
	})
}
