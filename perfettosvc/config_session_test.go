package perfettosvc

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/transport/perfetto"

	"github.com/tracepipe/tracepipe/pipeline"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// Every golden capture's text config (the one `perfetto --txt -c` sent to
// the real traced) runs as `tracepipe run -c x.pbtxt` runs it
// (LoadTraceConfigText, then New and Run with Perfetto producers). Each
// data source is served by a Go test-double Perfetto producer (one per
// data source name, as registering the name is what binds it), which must
// be set up with exactly the data-source config the text gives (name and
// sub-message), and whose packets must all reach the trace file. The
// configs' 2 s durations are shortened to 300 ms (after checking that the
// mapping read duration_ms) to keep the suite short; everything else runs
// as written.
func TestTraceConfigTextRunsGoldenConfigs(t *testing.T) {
	for _, f := range []string{
		"a_probes/trace_config.pbtxt", "b_track_event/trace_config.pbtxt", "c_probes_write_into_file/trace_config.pbtxt",
		"h_probes_large_readbuffers/trace_config.pbtxt", "j_probes_three_sources/trace_config.pbtxt",
		"k_probes_two_sessions/trace_config_1.pbtxt", "k_probes_two_sessions/trace_config_2.pbtxt",
	} {
		t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) {
			dir := testsupport.GoldenDir(t, "perfetto-ipc", filepath.Dir(f))
			runGoldenTextConfig(t, filepath.Join(dir, filepath.Base(f)))
		})
	}
}

func runGoldenTextConfig(t *testing.T, path string) {
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want ipc.TraceConfig
	if err := prototext.Unmarshal(text, &want); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, "trace.pftrace")
	cfg, err := config.LoadTraceConfigText(path, config.TraceConfigTextOptions{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Duration != time.Duration(want.GetDurationMs())*time.Millisecond || len(cfg.Buffers) != len(want.GetBuffers()) ||
		len(cfg.DataSources) != len(want.GetDataSources()) || cfg.WriteIntoFile != want.GetWriteIntoFile() || !cfg.Perfetto.Enabled {
		t.Fatalf("mapped config: duration %v, %d buffers, %d data sources, write_into_file %v, perfetto %v; text: %v",
			cfg.Duration, len(cfg.Buffers), len(cfg.DataSources), cfg.WriteIntoFile, cfg.Perfetto.Enabled, &want)
	}
	cfg.Duration = 300 * time.Millisecond

	sock := filepath.Join(tmp, "producer.sock")
	reg := perfetto.NewProducers()
	host := ipc.NewHost(ipc.NewProducerPort(reg))
	host.Logf = t.Logf
	if err := host.Listen(sock); err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	const packets = 50
	doubles := map[string]*perfettoDouble{}
	served := make(chan error, len(want.GetDataSources()))
	var names []string
	for _, ds := range want.GetDataSources() {
		name := ds.GetConfig().GetName()
		if doubles[name] != nil {
			continue
		}
		pd := dialDouble(t, sock, packets)
		defer pd.close()
		pd.connect("double."+name, &ipc.DataSourceDescriptor{Name: proto.String(name),
			WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)})
		go pd.serve(served)
		doubles[name] = pd
		names = append(names, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, names); len(missing) > 0 {
		t.Fatalf("never registered: %v", missing)
	}
	s, err := pipeline.New(cfg, pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}

	// Each producer was set up with its data source's config as written:
	// the text's DataSourceConfig, plus what the service sets itself.
	for _, ds := range want.GetDataSources() {
		pd := doubles[ds.GetConfig().GetName()]
		pd.mu.Lock()
		raw := pd.lastConfig
		pd.mu.Unlock()
		var got ipc.DataSourceConfig
		if err := proto.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		exp := proto.Clone(ds.GetConfig()).(*ipc.DataSourceConfig)
		for _, c := range []*ipc.DataSourceConfig{&got, exp} {
			// Set by the service (global buffer ids, session ids, timeouts).
			c.TargetBuffer, c.TraceDurationMs, c.TracingSessionId = nil, nil, nil
			c.EnableExtraGuardrails, c.StopTimeoutMs, c.SessionInitiator = nil, nil, nil
		}
		if !proto.Equal(&got, exp) {
			t.Errorf("%s was set up with\n%v\nwant\n%v", ds.GetConfig().GetName(), &got, exp)
		}
	}
	// Every double's packets are in the trace, once.
	seen := map[uint32]int{}
	for _, p := range tracetest.ReadTrace(t, out) {
		_, i, body, ok := tracetest.ScriptedID(p.Raw)
		if ok && binary.LittleEndian.Uint32(body) == 0xd0b1e {
			seen[uint32(i)]++
		}
	}
	for i := range uint32(packets) {
		if seen[i] != len(doubles) {
			t.Fatalf("packet %d is in the trace %d times, want once per producer (%d)", i, seen[i], len(doubles))
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

// Which of a built-in and a Perfetto producer serves a name is decided
// when the session binds its producers, and so is whether its section has
// a reader: perfetto_config on a source the built-in serves (no producer
// registered it), and config on a source a producer took over, are errors
// naming the field.
func TestPerfettoConfigReaderAtBind(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	reg := perfetto.NewProducers()
	host := ipc.NewHost(ipc.NewProducerPort(reg))
	if err := host.Listen(sock); err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	out := filepath.Join(dir, "t.pftrace")
	withPC := cfgtest.LoadYAML(t, `
duration: 1s
buffers: [{size_kb: 1024}]
perfetto: {enabled: true}
data_sources: [{name: linux.sys_stats, perfetto_config: {sys_stats_config: {meminfo_period_ms: 500}}}]
sinks: [{type: file, path: `+out+`}]
`)
	_, err := pipeline.New(withPC, pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err == nil || !strings.Contains(err.Error(), "data_sources[0].perfetto_config: nothing reads it: no Perfetto producer registered \"linux.sys_stats\"") {
		t.Fatalf("built-in served with perfetto_config: %v", err)
	}

	pd := dialDouble(t, sock, 1)
	defer pd.close()
	pd.connect("double", &ipc.DataSourceDescriptor{Name: proto.String("linux.sys_stats")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, []string{"linux.sys_stats"}); len(missing) > 0 {
		t.Fatal(missing)
	}
	withConfig := cfgtest.LoadYAML(t, `
duration: 1s
buffers: [{size_kb: 1024}]
perfetto: {enabled: true}
data_sources: [{name: linux.sys_stats, config: {meminfo_period_ms: 500}}]
sinks: [{type: file, path: `+out+`}]
`)
	_, err = pipeline.New(withConfig, pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err == nil || !strings.Contains(err.Error(), "data_sources[0].config: nothing reads it") || !strings.Contains(err.Error(), "perfetto_config") {
		t.Fatalf("producer served with config: %v", err)
	}
}
