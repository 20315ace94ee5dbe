package pipeline

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// A perfetto-path program (Perfetto's for_testing patch program, which
// fails on every packet without for_testing.protovm_patch) keeps its
// protovms packet, and trace_processor — as `tracepipe check` predicts it,
// running the VM on every packet of the registered sequences — replaces no
// event: every synthetic slice and counter is imported.
func TestPerfettoPathKeepsEvents(t *testing.T) {
	program, err := filepath.Abs("../protovm/testdata/service_program.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "trace.pftrace")
	runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`
buffers: [{size_kb: 4096, fill_policy: ring_buffer}]
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config: {writers: 2, rate: 0, packet_size: 200, max_packets: 2000, names: 50, counter_every: 4, deterministic_timestamps: true}
    protovm: {program: %q, memory_limit_kb: 64, path: perfetto}
sinks: [{type: file, path: %q}]
`, program, out)))
	protovms := 0
	for _, p := range tracetest.ReadTrace(t, out) {
		if p.Info.PayloadField == tracefile.FieldProtoVMs {
			protovms++
		}
	}
	rep, err := tpimport.CheckFile(out, tpimport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if protovms != 1 || rep.ProtoVM.Instances != 1 {
		t.Fatalf("%d protovms packets, %d VMs in trace_processor", protovms, rep.ProtoVM.Instances)
	}
	if !rep.Clean() || rep.ProducerImported != rep.ProducerPackets || rep.ProtoVM.Ok != 0 {
		t.Fatalf("findings %v, %d of %d producer packets imported, %d patches Ok", rep.Codes(), rep.ProducerImported, rep.ProducerPackets, rep.ProtoVM.Ok)
	}
	if rep.ProtoVM.Error == 0 {
		t.Fatal("trace_processor offered no packet to the VM: the provenance does not register the sequences")
	}
}
