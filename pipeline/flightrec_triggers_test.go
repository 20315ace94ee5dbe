package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"

	"google.golang.org/protobuf/encoding/protowire"
)

// triggerSession runs a session of the synthetic source with trigger
// config tc (YAML); act runs while it records. It returns the result and
// the live trace's packets.
func triggerSession(t *testing.T, tc string, act func(s *Service), extra ...string) (*Result, []tracetest.Packet, string) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "live.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 60s
buffers: [{size_kb: 1024}]
data_sources:
  - name: tracepipe.synthetic
    config: {writers: 2, rate: 500, packet_size: 64}
sinks: [{type: file, path: %q}]
%s
`, out, tc), extra...)
	s, err := New(cfg, Options{Logger: testsupport.Logger(t), TriggerSeed: 7})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	var res *Result
	go func() {
		defer close(done)
		res, err = s.Run(ctx)
	}()
	if act != nil {
		act(s)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the session did not end")
	}
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the session ran until the test's deadline instead of ending on its trigger")
	}
	return res, tracetest.ReadTrace(t, out), dir
}

// dataPackets counts the packets of data sources (not the service's).
func dataPackets(pkts []tracetest.Packet) int {
	n := 0
	for _, p := range pkts {
		if p.Info.SequenceID > 1 {
			n++
		}
	}
	return n
}

// triggerPackets lists the trigger names written as trigger packets.
func triggerPackets(pkts []tracetest.Packet, field protowire.Number) []string {
	var out []string
	for _, p := range pkts {
		if name, ok := triggerName(p.Raw, field); ok {
			out = append(out, name)
		}
	}
	return out
}

func TestTriggerStartTracing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := `
trigger_config:
  trigger_mode: start_tracing
  trigger_timeout: 20s
  triggers: [{name: go, stop_delay: 300ms}]`
		var startedBefore uint64
		var t0 time.Time
		res, pkts, _ := triggerSession(t, tc, func(s *Service) {
			// 300 ms of synctest's clock (past the first status, at
			// 250 ms), then every goroutine is idle: the sources must not
			// have run before the trigger.
			time.Sleep(300 * time.Millisecond)
			synctest.Wait()
			startedBefore = s.Status().BytesIn
			t0 = time.Now()
			if got := s.ActivateTriggers("", "go"); len(got) != 1 {
				t.Errorf("ActivateTriggers = %v", got)
			}
		})
		if startedBefore != 0 {
			t.Fatalf("%d bytes recorded before the start trigger", startedBefore)
		}
		if d := time.Since(t0); d != 300*time.Millisecond {
			t.Errorf("the session ended %v after the start trigger, want its stop_delay (300ms)", d)
		}
		if dataPackets(pkts) == 0 || res.TriggerTimedOut {
			t.Fatalf("no data after the start trigger (timed out %v)", res.TriggerTimedOut)
		}
		if got := triggerPackets(pkts, fieldTrigger); len(got) != 1 || got[0] != "go" {
			t.Fatalf("trigger packets %v", got)
		}
	})
}

func TestTriggerTimeoutReturnsNoData(t *testing.T) {
	for _, mode := range []string{config.TriggerModeStart, config.TriggerModeStop} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tc := fmt.Sprintf(`
trigger_config:
  trigger_mode: %s
  trigger_timeout: 300ms
  triggers: [{name: never}]`, mode)
				start := time.Now()
				res, pkts, _ := triggerSession(t, tc, func(s *Service) {
					s.ActivateTriggers("", "unknown_trigger")
				})
				elapsed := time.Since(start)
				if !res.TriggerTimedOut || dataPackets(pkts) != 0 {
					t.Fatalf("timed out %v, %d data packets; want no data", res.TriggerTimedOut, dataPackets(pkts))
				}
				if res.Triggers.Unknown != 1 || res.Triggers.Acted != 0 {
					t.Fatalf("trigger stats %+v", res.Triggers)
				}
				// Nothing waits past the timeout: a start_tracing
				// session's sources never started, so there is nothing
				// to stop (no stop timeout); a stop_tracing session's
				// sources stop at once.
				if elapsed != 300*time.Millisecond {
					t.Errorf("the session took %v of synctest's clock, want trigger_timeout (300ms)", elapsed)
				}
			})
		})
	}
}

func TestTriggerStopTracing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := `
trigger_config:
  trigger_mode: stop_tracing
  trigger_timeout: 20s
  triggers: [{name: crash, stop_delay: 200ms}]`
		var t0 time.Time
		res, pkts, _ := triggerSession(t, tc, func(s *Service) {
			testsupport.WaitUntil(t, "data", 10*time.Second, func() bool { return s.Status().BytesIn > 0 })
			t0 = time.Now()
			s.ActivateTriggers("", "crash")
			s.ActivateTriggers("", "crash") // a second one changes nothing
		})
		// On synctest's clock the session ends exactly stop_delay after
		// the trigger (the final flush and stop of an in-process source
		// take no time).
		if d := time.Since(t0); d != 200*time.Millisecond {
			t.Errorf("the session ended %v after the trigger, want stop_delay (200ms)", d)
		}
		if res.TriggerTimedOut || dataPackets(pkts) == 0 {
			t.Fatalf("stop_tracing: timed out %v, %d data packets", res.TriggerTimedOut, dataPackets(pkts))
		}
		if got := triggerPackets(pkts, fieldTrigger); len(got) != 2 {
			t.Fatalf("trigger packets %v; want both acting triggers", got)
		}
	})
}

func TestTriggerCloneSnapshotLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := `
trigger_config:
  trigger_mode: clone_snapshot
  triggers:
    - {name: once, max_per_24h: 1}
    - {name: never, skip_probability: 1}
    - {name: from_app, producer_name_regex: "app[0-9]+"}
    - {name: later, stop_delay: 100ms}`
		var snaps int
		res, pkts, dir := triggerSession(t, tc, func(s *Service) {
			testsupport.WaitUntil(t, "data", 10*time.Second, func() bool { return s.Status().BytesIn > 0 })
			s.ActivateTriggers("", "once", "once", "never")
			s.ActivateTriggers("tool", "from_app")
			s.ActivateTriggers("app12", "from_app")
			testsupport.WaitUntil(t, "2 snapshots", 20*time.Second, func() bool { return s.SnapshotStats().Taken == 2 })
			s.ActivateTriggers("", "later")
			testsupport.WaitUntil(t, "the delayed snapshot", 20*time.Second, func() bool { return s.SnapshotStats().Taken == 3 })
			snaps = int(s.SnapshotStats().Taken)
			s.ActivateTriggers("", "zzz") // unknown
		}, "duration=5s")
		want := TriggerStats{Received: 7, Acted: 3, Unknown: 1, ProducerMismatch: 1, Skipped: 1, RateLimited: 1}
		if res.Triggers != want {
			t.Fatalf("trigger stats %+v; want %+v", res.Triggers, want)
		}
		if snaps != 3 || dataPackets(pkts) == 0 {
			t.Fatalf("%d snapshots, %d live data packets", snaps, dataPackets(pkts))
		}
		for _, name := range []string{"once", "from_app", "later"} {
			m, _ := filepath.Glob(filepath.Join(dir, "live.snap-*-"+name+".pftrace"))
			if len(m) != 1 {
				t.Fatalf("snapshot files for %s: %v", name, m)
			}
			sp := tracetest.ReadTrace(t, m[0])
			if got := triggerPackets(sp, fieldCloneSnapshotTrigger); len(got) != 1 || got[0] != name {
				t.Fatalf("%s: clone_snapshot_trigger %v", m[0], got)
			}
			if dataPackets(sp) == 0 {
				t.Fatalf("%s: no data in the snapshot", m[0])
			}
		}
		got := triggerPackets(pkts, fieldTrigger)
		if strings.Join(got, ",") != "once,from_app,later" {
			t.Fatalf("live trigger packets %v", got)
		}
	})
}

func TestTriggerSkipProbabilityIsSeeded(t *testing.T) {
	draw := func() []string {
		s := &Service{}
		s.trig.init(&config.TriggerConfig{Mode: config.TriggerModeClone, Triggers: []config.TriggerSpec{{Name: "t", SkipProbability: 0.5}}}, 42)
		s.trig.acts = make(chan triggerAct, 100)
		var out []string
		for range 40 {
			out = append(out, fmt.Sprint(len(s.ActivateTriggers("", "t"))))
		}
		return out
	}
	a, b := draw(), draw()
	if strings.Join(a, "") != strings.Join(b, "") {
		t.Fatal("the same seed drew different skips")
	}
	ones := strings.Count(strings.Join(a, ""), "1")
	if ones == 0 || ones == 40 {
		t.Fatalf("skip_probability 0.5 acted %d of 40 times", ones)
	}
}

func TestTriggerConfigErrorsNameFields(t *testing.T) {
	cases := map[string]string{
		"trigger_config.trigger_mode":                    "trigger_config: {trigger_mode: sometimes, triggers: [{name: a}]}",
		"trigger_config.trigger_timeout":                 "trigger_config: {trigger_mode: stop_tracing, triggers: [{name: a}]}",
		"trigger_config.triggers":                        "trigger_config: {trigger_mode: clone_snapshot}",
		"trigger_config.triggers[1].name":                "trigger_config: {trigger_mode: clone_snapshot, triggers: [{name: a}, {name: a}]}",
		"trigger_config.triggers[0].skip_probability":    "trigger_config: {trigger_mode: clone_snapshot, triggers: [{name: a, skip_probability: 1.5}]}",
		"trigger_config.triggers[0].producer_name_regex": "trigger_config: {trigger_mode: clone_snapshot, triggers: [{name: a, producer_name_regex: '('}]}",
		"unique_session_name":                            "unique_session_name: 'two words'",
		"rotate_period":                                  "rotate_period: 10ms",
	}
	for want, text := range cases {
		path := filepath.Join(t.TempDir(), "c.yaml")
		body := "buffers: [{size_kb: 1024}]\ndata_sources: [{name: tracepipe.synthetic}]\n" + text + "\n"
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(config.LoadOptions{Path: path})
		var ve *config.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v; want one naming %s", text, err, want)
		}
	}
}

func TestClearBeforeCloneNeedsTransfer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	body := "buffers: [{size_kb: 1024, clear_before_clone: true}]\ndata_sources: [{name: tracepipe.synthetic}]\nsinks: [{type: file, path: x.pftrace}]\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(config.LoadOptions{Path: path}); err == nil || !strings.Contains(err.Error(), "buffers[0].clear_before_clone") {
		t.Fatalf("error %v; want one naming buffers[0].clear_before_clone", err)
	}
	if _, err := config.Load(config.LoadOptions{Path: path, Sets: []string{"buffers[0].transfer_on_clone=true"}}); err != nil {
		t.Fatalf("with transfer_on_clone: %v", err)
	}
}
