package pipeline

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins/builtin"
	"github.com/tracepipe/tracepipe/tracefile"
)

// TestImportRisksNamesStatefulSourcesWithoutProgram: a ring that
// overwrote chunks is a risk only for the buffers where a data source that
// may intern data runs without a ProtoVM program (each named once);
// stateless built-ins and sources with a program are not named, a buffer
// that overwrote nothing is not named, and the writer, SMB, patch and
// rotation losses each add their reason.
func TestImportRisksNamesStatefulSourcesWithoutProgram(t *testing.T) {
	cfg := &config.Config{DataSources: []config.DataSourceConfig{
		{Name: builtin.SysStatsName, TargetBuffer: 0},
		{Name: "track_event", TargetBuffer: 1},
		{Name: "track_event", TargetBuffer: 1},
		{Name: "with.program", TargetBuffer: 1, ProtoVM: &config.ProtoVMConfig{Program: "p.yaml", MemoryLimitKB: 64}},
		{Name: builtin.ProcessStatsName, TargetBuffer: 1},
		{Name: "quiet", TargetBuffer: 2},
	}}
	res := &Result{Stats: tracefile.TraceStats{BufferStats: []tracefile.BufferStats{
		{ChunksOverwritten: 9, TraceWriterPacketLoss: 1},
		{ChunksOverwritten: 4, TraceWriterPacketLoss: 2},
		{},
	}}}
	want := []string{
		"buffers[1] overwrote 4 chunk(s) holding track_event, which has no ProtoVM program to restore the interned state its later packets need",
		"3 packet(s) lost inside producers' writers",
	}
	if got := res.ImportRisks(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("ImportRisks:\n got %q\nwant %q", got, want)
	}

	res.Stats.Tracepipe = &tracefile.TracepipeStats{ProducerPacketsDropped: 5, ProtoVMPatchesFailed: 6, SinkRestoreOverflows: 7}
	got := strings.Join(res.ImportRisks(cfg), "; ")
	for _, w := range []string{"producers dropped 5 packet(s) on a full shared memory buffer", "6 ProtoVM patch(es) failed", "7 rotated file(s) started without a sequence's state"} {
		if !strings.Contains(got, w) {
			t.Errorf("ImportRisks misses %q: %s", w, got)
		}
	}

	if got := (&Result{Stats: tracefile.TraceStats{BufferStats: []tracefile.BufferStats{{ChunksOverwritten: 9}}}}).ImportRisks(cfg); got != nil {
		t.Errorf("a ring overwriting only sys_stats is a risk: %q", got)
	}
}

// TestConfigLossContextMatchesEchoedConfig: the loss context run's
// summary takes from the config is the one `tracepipe stats` decodes from
// the trace_config the session echoes into its trace.
func TestConfigLossContextMatchesEchoedConfig(t *testing.T) {
	for _, cfg := range []*config.Config{
		{Buffers: []config.BufferConfig{{SizeKB: 64, FillPolicy: config.FillPolicyRingBuffer}, {SizeKB: 64, FillPolicy: config.FillPolicyDiscard}}},
		{WriteIntoFile: true, Buffers: []config.BufferConfig{{SizeKB: 64, FillPolicy: config.FillPolicyDiscard}, {SizeKB: 64, FillPolicy: config.FillPolicyRingBuffer}}},
	} {
		pkt := appendTraceConfig(nil, cfg)
		num, typ, n := protowire.ConsumeTag(pkt)
		if n < 0 || num != tracefile.FieldTraceConfig || typ != protowire.BytesType {
			t.Fatalf("appendTraceConfig wrote field %d type %d first", num, typ)
		}
		payload, m := protowire.ConsumeBytes(pkt[n:])
		if m < 0 {
			t.Fatal("trace_config payload does not decode")
		}
		echoed, err := tracefile.DecodeLossContext(payload)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.LossContext(); !reflect.DeepEqual(got, echoed) {
			t.Errorf("write_into_file %v: config says %+v, the echoed trace_config %+v", cfg.WriteIntoFile, got, echoed)
		}
	}
}
