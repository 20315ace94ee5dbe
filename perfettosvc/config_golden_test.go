package perfettosvc

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/transport/perfetto"

	"github.com/tracepipe/tracepipe/pipeline"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// The acceptance test of data_sources[i].perfetto_config: a YAML session
// describing capture j's three data sources (sys_stats with its counters,
// system_info, ftrace with its events, over two buffers) is served by Go
// test-double Perfetto producers, one per data source, and each receives
// in SetupDataSource the DataSourceConfig the real traced sent
// traced_probes for the same config (decoded from the capture's
// producer.conn1.s2c frames).
//
// Compared field by field on the wire: the data source's own configs
// (fields 100 and up: sys_stats_config, ftrace_config) byte for byte, and
// name, trace_duration_ms, enable_extra_guardrails, stop_timeout_ms and
// session_initiator by value; no field may be in one and not the other.
// May differ: tracing_session_id (each service numbers its sessions) and
// target_buffer (the service's global buffer ids; the golden replays pin
// tracepipe's), of which only the grouping must agree: the sources traced
// put in one buffer are in one buffer here, the others in another. The
// whole message is not compared as bytes because traced writes its fields
// in declaration order (1, 2, 3, 7, 6, 8, 4, then 100+), Go's marshalling
// in field-number order; a producer parses either the same.
func TestPerfettoConfigYAMLMatchesGoldenSetup(t *testing.T) {
	capture := testsupport.GoldenDir(t, "perfetto-ipc", "j_probes_three_sources")
	golden := map[string][]byte{} // data source name → DataSourceConfig as traced sent it
	var order []string
	for _, r := range readGoldenRows(t, capture) {
		if !r.producer || r.c2s || r.method != "GetAsyncCommand" {
			continue
		}
		var cmd ipc.GetAsyncCommandResponse
		if err := proto.Unmarshal(r.frame.GetMsgInvokeMethodReply().GetReplyProto(), &cmd); err != nil {
			t.Fatal(err)
		}
		if s := cmd.GetSetupDataSource(); s != nil {
			raw := setupConfigBytes(t, r.frame.GetMsgInvokeMethodReply().GetReplyProto())
			golden[s.GetConfig().GetName()] = raw
			order = append(order, s.GetConfig().GetName())
		}
	}
	if len(golden) != 3 {
		t.Fatalf("capture j has setup_data_source for %v, want three data sources", order)
	}

	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	reg := perfetto.NewProducers()
	host := ipc.NewHost(ipc.NewProducerPort(reg))
	host.Logf = t.Logf
	if err := host.Listen(sock); err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	doubles := map[string]*perfettoDouble{}
	served := make(chan error, len(order))
	for _, name := range order {
		pd := dialDouble(t, sock, 10)
		defer pd.close()
		pd.connect("double."+name, &ipc.DataSourceDescriptor{Name: proto.String(name),
			WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)})
		go pd.serve(served)
		doubles[name] = pd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, order); len(missing) > 0 {
		t.Fatalf("never registered: %v", missing)
	}

	// Capture j's trace_config.pbtxt, as a tracepipe session.
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 2s
buffers:
  - {size_kb: 4096, fill_policy: discard}
  - {size_kb: 2048, fill_policy: discard}
perfetto: {enabled: true}
data_sources:
  - name: linux.sys_stats
    target_buffer: 0
    perfetto_config:
      sys_stats_config:
        meminfo_period_ms: 500
        meminfo_counters: [MEMINFO_MEM_TOTAL, MEMINFO_MEM_FREE, MEMINFO_MEM_AVAILABLE]
        vmstat_period_ms: 500
        vmstat_counters: [VMSTAT_NR_FREE_PAGES, VMSTAT_PGFAULT, VMSTAT_PGMAJFAULT]
  - name: linux.system_info
    target_buffer: 0
  - name: linux.ftrace
    target_buffer: 1
    perfetto_config:
      ftrace_config:
        ftrace_events: [power/cpu_idle, irq/softirq_entry, irq/softirq_exit]
sinks: [{type: file, path: %q}]
`, filepath.Join(dir, "trace.pftrace")))
	s, err := pipeline.New(cfg, pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err != nil {
		t.Fatal(err)
	}
	// Set up is all this test needs: the session is stopped (gracefully)
	// as soon as every producer has been set up, not after its 2 s.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			all := true
			for _, pd := range doubles {
				pd.mu.Lock()
				all = all && pd.lastConfig != nil
				pd.mu.Unlock()
			}
			if all {
				stop()
				return
			}
		}
	}()
	if _, err := s.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the producers were not all set up within 60 s")
	}

	gotBuf := map[string]uint64{}
	wantBuf := map[string]uint64{}
	for _, name := range order {
		pd := doubles[name]
		pd.mu.Lock()
		got := pd.lastConfig
		pd.mu.Unlock()
		gf, wf := wireFields(t, got), wireFields(t, golden[name])
		for num := range union(gf, wf) {
			switch num {
			case 4: // tracing_session_id: each service's own numbering
				continue
			case 2: // target_buffer: compared as a grouping below
				gotBuf[name], wantBuf[name] = varintOf(t, gf[num]), varintOf(t, wf[num])
				continue
			}
			_, inGot := gf[num]
			_, inWant := wf[num]
			if inGot != inWant || !bytes.Equal(gf[num], wf[num]) {
				t.Errorf("%s: DataSourceConfig field %d is %x, traced sent %x", name, num, gf[num], wf[num])
			}
		}
		if len(wf[104])+len(wf[100]) == 0 && name != "linux.system_info" {
			t.Errorf("%s: the golden config carries no data-source config: the comparison would prove nothing", name)
		}
	}
	for _, a := range order {
		for _, b := range order {
			if (gotBuf[a] == gotBuf[b]) != (wantBuf[a] == wantBuf[b]) {
				t.Errorf("target buffers: %s and %s are %d and %d here, %d and %d in traced's setup", a, b, gotBuf[a], gotBuf[b], wantBuf[a], wantBuf[b])
			}
		}
	}
	for _, pd := range doubles {
		pd.close()
	}
	for range doubles {
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	}
}

// setupConfigBytes returns the DataSourceConfig of a GetAsyncCommand reply
// holding setup_data_source, as its bytes on the wire (not re-encoded).
func setupConfigBytes(t *testing.T, reply []byte) []byte {
	t.Helper()
	setup := wireFields(t, reply)[6] // setup_data_source
	cfg := wireFields(t, setup)[2]   // config
	if cfg == nil {
		t.Fatalf("setup_data_source without a config: %x", reply)
	}
	return cfg
}

// wireFields returns, for each field number of a message, its payload
// (length-delimited) or its encoded value, repeated occurrences appended.
func wireFields(t *testing.T, b []byte) map[protowire.Number][]byte {
	t.Helper()
	out := map[protowire.Number][]byte{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("malformed message %x", b)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			t.Fatalf("malformed field %d in %x", num, b)
		}
		v := b[n : n+m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		out[num] = append(out[num], v...)
		if out[num] == nil {
			out[num] = []byte{} // present, empty
		}
		b = b[n+m:]
	}
	return out
}

func union(a, b map[protowire.Number][]byte) map[protowire.Number]bool {
	out := map[protowire.Number]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func varintOf(t *testing.T, b []byte) uint64 {
	t.Helper()
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		t.Fatalf("not a varint: %x", b)
	}
	return v
}
