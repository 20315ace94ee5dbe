package pipeline

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// configs/ring_buffer.yaml, shortened (1 MiB ring, 2 s, 5000 packets/s per
// writer) so that the ring wraps many times, imports in trace_processor
// without a skipped packet: every sequence of the synthetic source gets a
// restore ahead of its first survivor. Without the program, the survivors
// up to each writer's next clear (clear_period 2 s) are skipped. Two
// verdicts: tpModel (this package's small model of trace_processor's
// rules) and tpimport (`tracepipe check`, the project's oracle).
func TestRingBufferConfigSurvivorsImport(t *testing.T) {
	for _, withProgram := range []bool{true, false} {
		name := map[bool]string{true: "program", false: "no_program"}[withProgram]
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ring.pftrace.gz")
			cfg, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", "ring_buffer.yaml"), Sets: []string{
				"duration=2s", "buffers[0].size_kb=1024", "data_sources[0].config.rate=5000", "sinks[0].path=" + out,
			}})
			if err != nil {
				t.Fatal(err)
			}
			if !withProgram {
				cfg.DataSources[0].ProtoVM = nil
			}
			res := runSession(t, cfg)
			st := res.Stats.BufferStats[0]
			if st.WriteWrapCount < 3 {
				t.Fatalf("the ring wrapped %d times; want >= 3", st.WriteWrapCount)
			}
			pkts := tracetest.ReadTrace(t, out)
			m := newTPModel()
			for _, p := range pkts {
				if p.Info.PayloadField == tracefile.FieldProtoVMs {
					t.Fatal("protovms packet for a restore-path program")
				}
				m.packet(t, p.Raw)
			}
			rep, err := tpimport.CheckFile(out, tpimport.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var checkSkipped int64
			for _, q := range rep.Sequences {
				checkSkipped += q.NeedsSkipped
			}
			tp := res.Stats.Tracepipe
			t.Logf("check: %d skipped, findings %v", checkSkipped, rep.Codes())
			t.Logf("%s: wrapped %d times, %d packets, %d skipped, %d names resolved / %d not, %d counters / %d before their track, %d restores",
				name, st.WriteWrapCount, len(pkts), m.totalSkipped(), m.names, m.unresolved, m.counters, m.counterInvalid, tp.SequenceRestores)
			if !withProgram {
				if m.totalSkipped() == 0 || checkSkipped == 0 {
					t.Fatalf("no packet skipped without the program (model %d, check %d): the test proves nothing", m.totalSkipped(), checkSkipped)
				}
				return
			}
			if m.totalSkipped() != 0 || m.unresolved != 0 || m.counterInvalid != 0 || m.names == 0 || m.counters == 0 {
				t.Fatalf("with the program: %d packets skipped (%v), %d names unresolved, %d counter events before their track", m.totalSkipped(), m.skipped, m.unresolved, m.counterInvalid)
			}
			if checkSkipped != 0 || len(rep.Codes()) != 0 && !onlySMBLoss(rep) {
				var sb strings.Builder
				_ = rep.WriteText(&sb)
				t.Fatalf("tracepipe check with the program: %d skipped\n%s", checkSkipped, sb.String())
			}
			if tp.SequenceRestores == 0 || tp.ProtoVMPatchesFailed != 0 {
				t.Fatalf("tracepipe stats %+v", tp)
			}
		})
	}
}

// onlySMBLoss reports whether every finding is the producers' SMB loss
// (traced_buf_trace_writer_packet_loss), which a stall can still leave on a
// loaded machine and which has nothing to do with ring wrap.
func onlySMBLoss(rep *tpimport.Report) bool {
	for _, c := range rep.Codes() {
		if c != "traced_buf_trace_writer_packet_loss" {
			return false
		}
	}
	return true
}
