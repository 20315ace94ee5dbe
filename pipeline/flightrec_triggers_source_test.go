package pipeline

import (
	"fmt"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"google.golang.org/protobuf/encoding/protowire"
)

// triggerProducer returns the producer_name of the trigger packets.
func triggerProducers(pkts []tracetest.Packet, field protowire.Number) []string {
	var out []string
	for _, p := range pkts {
		walkTopLevel(p.Raw, func(num protowire.Number, f []byte) {
			if num != field {
				return
			}
			_, _, n := protowire.ConsumeTag(f)
			body, _ := protowire.ConsumeBytes(f[n:])
			walkTopLevel(body, func(num protowire.Number, g []byte) {
				if num == 2 {
					_, _, m := protowire.ConsumeTag(g)
					v, _ := protowire.ConsumeBytes(g[m:])
					out = append(out, string(v))
				}
			})
		})
	}
	return out
}

// An in-process data source fires a trigger through its Host (the
// synthetic source's trigger option, at a packet count): subject to
// producer_name_regex, it takes a snapshot naming the producer.
func TestInProcessSourceFiresCloneTrigger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc := `
trigger_config:
  trigger_mode: clone_snapshot
  triggers: [{name: synth_fired, producer_name_regex: "tracepipe\\.synth.*"}]`
		dir := ""
		res, pkts, d := triggerSession(t, tc, func(s *Service) {
			testsupport.WaitUntil(t, "the source's snapshot", 20*time.Second, func() bool { return s.SnapshotStats().Taken == 1 })
		}, "duration=3s", "data_sources[0].config.trigger=synth_fired", "data_sources[0].config.trigger_after_packets=100")
		dir = d
		if res.Triggers.Acted != 1 {
			t.Fatalf("trigger stats %+v", res.Triggers)
		}
		if got := triggerProducers(pkts, fieldTrigger); len(got) != 1 || got[0] != "tracepipe.synthetic" {
			t.Fatalf("trigger packet producers %v", got)
		}
		m, _ := filepath.Glob(filepath.Join(dir, "live.snap-1-synth_fired.pftrace"))
		if len(m) != 1 {
			t.Fatal("no snapshot file for the source's trigger")
		}
		sp := tracetest.ReadTrace(t, m[0])
		if got := triggerProducers(sp, fieldCloneSnapshotTrigger); len(got) != 1 || got[0] != "tracepipe.synthetic" {
			t.Fatalf("clone_snapshot_trigger producers %v", got)
		}
	})
}

// A plugin's data source fires a trigger over the plugin protocol: it
// stops a stop_tracing session; a producer_name_regex that does not
// match the plugin's data source leaves the trigger without effect (the
// session then times out without data).
func TestPluginFiresStopTrigger(t *testing.T) {
	plugin := counterPlugin(t)
	for _, tc := range []struct {
		regex string
		acts  bool
	}{{"example\\..*", true}, {"someone_else", false}} {
		t.Run(tc.regex, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "p.pftrace")
			cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 60s
buffers: [{size_kb: 1024}]
data_sources:
  - name: example.counter
    plugin: %q
    config: {packets: 50, trigger: counted}
sinks: [{type: file, path: %q}]
trigger_config:
  trigger_mode: stop_tracing
  trigger_timeout: 3s
  triggers: [{name: counted, stop_delay: 100ms, producer_name_regex: %q}]
`, plugin, out, tc.regex))
			res := runSession(t, cfg)
			pkts := tracetest.ReadTrace(t, out)
			if tc.acts {
				if res.TriggerTimedOut || res.Triggers.Acted != 1 || dataPackets(pkts) != 50 {
					t.Fatalf("timed out %v, stats %+v, %d data packets", res.TriggerTimedOut, res.Triggers, dataPackets(pkts))
				}
				if got := triggerProducers(pkts, fieldTrigger); len(got) != 1 || got[0] != "example.counter" {
					t.Fatalf("trigger producers %v", got)
				}
				return
			}
			if !res.TriggerTimedOut || res.Triggers.ProducerMismatch != 1 || dataPackets(pkts) != 0 {
				t.Fatalf("timed out %v, stats %+v, %d data packets", res.TriggerTimedOut, res.Triggers, dataPackets(pkts))
			}
		})
	}
}
