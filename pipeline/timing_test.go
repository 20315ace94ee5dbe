package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/tracefile"
)

// hangGates holds the channels test.hang sources block on, by the name
// in their config's gate key; a test closes its gate once the session
// ended so that the blocked calls return and the bubble's goroutines end.
var hangGates sync.Map // string → chan struct{}

// hanging is an in-process data source that writes packets writer 7,
// 0..packets-1 (scriptedPacket) in Start, flushes them, then blocks in the
// call its config names (hang: start, flush or stop) until its gate
// closes: the in-process stand-in for a hung plugin, so that the bounds
// of a session can be checked on synctest's clock.
type hanging struct {
	hang    string
	packets int
	gate    chan struct{}
}

func init() {
	plugins.Register("test.hang", func(cfg map[string]any) (plugins.DataSource, error) {
		h := &hanging{packets: 100}
		for k, v := range cfg {
			switch k {
			case "hang":
				h.hang = v.(string)
			case "packets":
				h.packets = v.(int)
			case "gate":
				g, ok := hangGates.Load(v.(string))
				if !ok {
					return nil, fmt.Errorf("gate %q: not set up by the test", v)
				}
				h.gate = g.(chan struct{})
			default:
				return nil, fmt.Errorf("%s: unknown key", k)
			}
		}
		return h, nil
	})
}

func (h *hanging) block(call string) {
	if h.hang == call {
		<-h.gate
	}
}

func (h *hanging) Start(host plugins.Host) error {
	pw, err := host.NewWriter()
	if err != nil {
		return err
	}
	for i := range h.packets {
		if err := pw.WritePacket(scriptedPacket(7, i, 64, false)); err != nil {
			return err
		}
	}
	if err := pw.Flush(); err != nil {
		return err
	}
	h.block("start")
	return nil
}

func (h *hanging) Flush() error           { h.block("flush"); return nil }
func (h *hanging) ClearIncrementalState() {}
func (h *hanging) Stop() error            { h.block("stop"); return nil }

// TestSessionBoundsWithHungDataSource: whichever call a data source hangs
// in, the session ends within duration + flush_timeout + the stop bound
// (startTimeout, stopTimeout) of synctest's clock, the other data source's
// packets are all there, the hung one's are kept, and the hang is
// attributed to data_sources[0]. A session that waits longer than a bound
// (a missed timer, a wait on a hung call) fails the bound; one that skips
// a wait fails the lower bound.
func TestSessionBoundsWithHungDataSource(t *testing.T) {
	const (
		duration     = 1500 * time.Millisecond
		flushTimeout = time.Second
		packets      = 100
	)
	for _, tc := range []struct {
		hang string
		// least is the time the session must take: a hang costs its
		// bound, not less (the service waited for the call).
		least      time.Duration
		flushOK    bool
		wantErr    string
		wantPkts   int // the hung source's packets in the trace
		startFails bool
	}{
		// A hung Flush fails the periodic flush at 1 s + flush_timeout;
		// the final flush does not ask the busy producer again, and its
		// Stop waits behind the hung Flush until stopTimeout.
		{hang: "flush", least: duration + stopTimeout, flushOK: false, wantErr: "did not stop in time", wantPkts: packets},
		// The final flush succeeds; Stop hangs until stopTimeout.
		{hang: "stop", least: duration + stopTimeout, flushOK: true, wantErr: "did not stop in time", wantPkts: packets},
		// Start never returns: the session records for its duration
		// without it, then stops waiting at stopTimeout and reports the
		// source as a start failure (not as a clean run with no loss).
		{hang: "start", least: duration + stopTimeout, flushOK: true, wantErr: "its Start had not returned", wantPkts: packets, startFails: true},
	} {
		t.Run(tc.hang, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				gate := make(chan struct{})
				hangGates.Store(t.Name(), gate)
				defer hangGates.Delete(t.Name())
				out := filepath.Join(t.TempDir(), "hang.pftrace")
				cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: %v
flush_timeout: %v
write_into_file: true
file_write_period: 200ms
flush_period: 1s
buffers: [{size_kb: 4096}]
data_sources:
  - name: test.hang
    config: {hang: %s, packets: %d, gate: %q}
  - name: test.scripted
    config: {writers: 2, packets: 300}
sinks: [{type: file, path: %q}]
`, duration, flushTimeout, tc.hang, packets, t.Name(), out))
				s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				res, err := s.Run(context.Background())
				elapsed := time.Since(start)
				close(gate) // the hung call returns; its goroutines end
				t.Logf("session took %v of synctest's clock", elapsed)
				if err != nil {
					t.Fatal(err)
				}
				bound := duration + flushTimeout + stopTimeout
				if elapsed > bound || elapsed < tc.least {
					t.Errorf("the session took %v of synctest's clock, want %v..%v (duration + flush_timeout + stop bound)", elapsed, tc.least, bound)
				}
				perWriter := map[int]int{}
				for _, p := range tracetest.ReadTrace(t, out) {
					if w, _, _, ok := tracetest.ScriptedID(p.Raw); ok {
						perWriter[w]++
					}
				}
				if perWriter[0] != 300 || perWriter[1] != 300 {
					t.Errorf("the other data source's packets: %d and %d of 300 each", perWriter[0], perWriter[1])
				}
				if perWriter[7] != tc.wantPkts {
					t.Errorf("the hung source's packets: %d, want %d (committed before it hung)", perWriter[7], tc.wantPkts)
				}
				if ok := res.Stats.FinalFlushOutcome == tracefile.FlushOutcomeSucceeded; ok != tc.flushOK {
					t.Errorf("final flush outcome %d, want succeeded=%v", res.Stats.FinalFlushOutcome, tc.flushOK)
				}
				var ps *tracefile.ProducerStats
				if tp := res.Stats.Tracepipe; tp != nil {
					for i := range tp.Producers {
						if tp.Producers[i].Index == 0 {
							ps = &tp.Producers[i]
						} else {
							t.Errorf("a fault attributed to another producer: %+v", tp.Producers[i])
						}
					}
				}
				if ps == nil || !strings.Contains(ps.Error, tc.wantErr) {
					t.Errorf("attributed stats %+v, want %q", ps, tc.wantErr)
				}
				if got := len(res.StartErrors) > 0; got != tc.startFails {
					t.Errorf("start errors %v", res.StartErrors)
				}
			})
		})
	}
}

// TestStartBoundCountsFromTheStartTrigger: in a start_tracing session the
// data sources start when the trigger acts, so the start bound runs from
// there. A source hung in Start is given up startTimeout after the
// trigger (not after Run: the timer had long fired, with nothing starting,
// and a later Start was left unbounded until the session stopped).
func TestStartBoundCountsFromTheStartTrigger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		hangGates.Store(t.Name(), gate)
		defer hangGates.Delete(t.Name())
		const late = startTimeout + 2*time.Second // the trigger comes after the timer armed at Run
		out := filepath.Join(t.TempDir(), "hang.pftrace")
		cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 0
write_into_file: true
file_write_period: 200ms
buffers: [{size_kb: 4096}]
trigger_config:
  trigger_mode: start_tracing
  trigger_timeout: 1m
  triggers: [{name: go, stop_delay: 30s}]
data_sources:
  - name: test.hang
    config: {hang: start, packets: 10, gate: %q}
  - name: test.scripted
    config: {writers: 1, packets: 50}
sinks: [{type: file, path: %q}]
`, t.Name(), out))
		s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		var triggered time.Time
		go func() {
			time.Sleep(late)
			triggered = time.Now()
			s.ActivateTriggers("", "go")
		}()
		// The source is given up startTimeout after the trigger. The other
		// source has long written its packets and ended (Finite) by then,
		// so the session ends there (stop_delay would end it at 30 s).
		res, err := s.Run(context.Background())
		ended := time.Now()
		close(gate)
		if err != nil {
			t.Fatal(err)
		}
		if d := ended.Sub(triggered); d < startTimeout || d > startTimeout+time.Second {
			t.Errorf("the session ended %v after the start trigger, want startTimeout (%v): the source hung in Start is given up then", d, startTimeout)
		}
		if len(res.StartErrors) != 1 || !strings.Contains(res.StartErrors[0].Error(), "did not start within") {
			t.Errorf("start errors %v, want data_sources[0]: did not start within %v", res.StartErrors, startTimeout)
		}
	})
}
