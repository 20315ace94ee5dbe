package pipeline

import (
	"fmt"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Perfetto's TraceConfig field numbers (reference/service.md §9), written
// out here so that the test checks tracefile's encoder against the
// reference rather than against itself.
const (
	tcBuffers                = 1
	tcDataSources            = 2
	tcDurationMs             = 3
	tcProducers              = 6
	tcWriteIntoFile          = 8
	tcFileWritePeriodMs      = 9
	tcFlushPeriodMs          = 13
	tcFlushTimeoutMs         = 14
	tcIncrementalStateConfig = 21

	bufSizeKB, bufFillPolicy, bufName = 1, 4, 7
	dsConfig                          = 1
	dscName, dscTargetBuffer          = 1, 2
	dscBufferExhausted                = 9
	isClearPeriodMs                   = 1
	prodShmSizeKB, prodPageSizeKB     = 2, 3
	fillRingBuffer, fillDiscard       = 1, 2
	exhaustedStall                    = 3
)

// The session config is echoed once, as trace_config with Perfetto's
// TraceConfig field numbers, in the first read pass.
func TestTraceConfigEcho(t *testing.T) {
	out := filepath.Join(t.TempDir(), "cfg.pftrace")
	runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 3s
write_into_file: true
file_write_period: 250ms
flush_timeout: 2s
incremental_state: {clear_period: 500ms}
producers: {smb_size_kb: 512, smb_page_size_kb: 8}
buffers: [{name: main, size_kb: 2048}, {size_kb: 64, fill_policy: discard}]
data_sources:
  - {name: test.scripted, target_buffer: 1, buffer_exhausted_policy: stall, config: {packets: 3}}
sinks: [{type: file, path: %q}]
`, out)))
	var echoes [][]byte
	for _, p := range tracetest.ReadTrace(t, out) {
		if p.Info.PayloadField == tracefile.FieldTraceConfig {
			if p.Info.SequenceID != 1 {
				t.Fatalf("trace_config on sequence %d", p.Info.SequenceID)
			}
			echoes = append(echoes, p.Info.Payload)
		}
	}
	if len(echoes) != 1 {
		t.Fatalf("%d trace_config packets, want 1", len(echoes))
	}
	top := map[protowire.Number][]uint64{}
	var buffers, sources, producers, incr [][]byte
	testsupport.Fields(t, echoes[0], func(num protowire.Number, v uint64, p []byte) {
		switch num {
		case tcBuffers:
			buffers = append(buffers, p)
		case tcDataSources:
			sources = append(sources, p)
		case tcProducers:
			producers = append(producers, p)
		case tcIncrementalStateConfig:
			incr = append(incr, p)
		default:
			top[num] = append(top[num], v)
		}
	})
	// flush_period is derived from file_write_period in streaming mode:
	// without it trace_processor raises config_write_into_file_no_flush.
	want := map[protowire.Number]uint64{tcDurationMs: 3000, tcWriteIntoFile: 1, tcFileWritePeriodMs: 250, tcFlushPeriodMs: 250, tcFlushTimeoutMs: 2000}
	for num, v := range want {
		if len(top[num]) != 1 || top[num][0] != v {
			t.Errorf("field %d = %v, want %d", num, top[num], v)
		}
	}
	msg := func(b []byte) map[protowire.Number]any {
		m := map[protowire.Number]any{}
		testsupport.Fields(t, b, func(num protowire.Number, v uint64, p []byte) {
			if p != nil {
				m[num] = string(p)
			} else {
				m[num] = v
			}
		})
		return m
	}
	if len(buffers) != 2 {
		t.Fatalf("%d buffers", len(buffers))
	}
	if b := msg(buffers[0]); b[bufSizeKB] != uint64(2048) || b[bufFillPolicy] != uint64(fillRingBuffer) || b[bufName] != "main" {
		t.Errorf("buffers[0] = %v", b)
	}
	if b := msg(buffers[1]); b[bufSizeKB] != uint64(64) || b[bufFillPolicy] != uint64(fillDiscard) {
		t.Errorf("buffers[1] = %v", b)
	}
	if len(sources) != 1 {
		t.Fatalf("%d data sources", len(sources))
	}
	cfg, ok := msg(sources[0])[dsConfig].(string)
	if !ok {
		t.Fatal("data source without config")
	}
	if c := msg([]byte(cfg)); c[dscName] != "test.scripted" || c[dscTargetBuffer] != uint64(1) || c[dscBufferExhausted] != uint64(exhaustedStall) {
		t.Errorf("data source config = %v", c)
	}
	if len(producers) != 1 || msg(producers[0])[prodShmSizeKB] != uint64(512) || msg(producers[0])[prodPageSizeKB] != uint64(8) {
		t.Errorf("producers = %v", producers)
	}
	if len(incr) != 1 || msg(incr[0])[isClearPeriodMs] != uint64(500) {
		t.Errorf("incremental_state_config = %v", incr)
	}
}

// A Perfetto producer's data-source configs are echoed in the trace's
// trace_config as sent, whichever way they came (YAML perfetto_config or
// a consumer's DataSourceConfig); the service's own DataSourceConfig
// fields are not taken from it.
func TestTraceConfigEchoesPerfettoConfig(t *testing.T) {
	sys := &ipc.DataSourceConfig{Name: proto.String("ignored"), TracingSessionId: proto.Uint64(9),
		SysStatsConfig: &ipc.SysStatsConfig{MeminfoPeriodMs: proto.Uint32(500), MeminfoCounters: []ipc.MeminfoCounters{ipc.MeminfoCounters_MEMINFO_MEM_TOTAL}}}
	raw, err := proto.Marshal(sys)
	if err != nil {
		t.Fatal(err)
	}
	c := &config.Config{Buffers: []config.BufferConfig{{SizeKB: 64}}, DataSources: []config.DataSourceConfig{{Name: "linux.sys_stats", EncodedPerfettoConfig: raw}}}
	pkt := appendTraceConfig(nil, c)
	num, typ, n := protowire.ConsumeTag(pkt)
	body, m := protowire.ConsumeBytes(pkt[max(n, 0):])
	if num != tracefile.FieldTraceConfig || typ != protowire.BytesType || n < 0 || m < 0 {
		t.Fatalf("not a trace_config field: %x", pkt)
	}
	var echo ipc.TraceConfig
	if err := proto.Unmarshal(body, &echo); err != nil {
		t.Fatal(err)
	}
	got := echo.GetDataSources()[0].GetConfig()
	if got.GetName() != "linux.sys_stats" || got.TracingSessionId != nil || !proto.Equal(got.GetSysStatsConfig(), sys.GetSysStatsConfig()) {
		t.Fatalf("echoed %v", got)
	}
}
