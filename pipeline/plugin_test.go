package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// counterPlugin builds plugins/example/counterplugin once per test binary.
func counterPlugin(t *testing.T) string { return buildPlugin(t, "plugins/example/counterplugin") }

// A data source served by a plugin process goes through the same SMB,
// commit and readback path as an in-process one: its packets arrive whole
// and in order, stamped with the trusted pid of the process the service
// started, and a plugin that cannot serve its data source fails the
// session with the plugin's reason.
func TestServicePluginDataSource(t *testing.T) {
	plugin := counterPlugin(t)
	out := filepath.Join(t.TempDir(), "plugin.pftrace")
	res := runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 1500ms
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 4096}]
data_sources:
  - name: example.counter
    plugin: %q
    buffer_exhausted_policy: stall
    config: {packets: 3000, size: 700}
  - name: test.scripted
    config: {writers: 1, packets: 10}
sinks: [{type: file, path: %q}]
`, plugin, out)))
	var next uint32
	pluginSeq, pid := uint32(0), int32(0)
	for _, p := range tracetest.ReadTrace(t, out) {
		if p.Info.SequenceID < 2 {
			continue
		}
		if p.Info.TrustedPID == int32(os.Getpid()) {
			if _, _, _, ok := tracetest.ScriptedID(p.Raw); !ok {
				t.Fatalf("a packet stamped with this process's pid is not the in-process source's: %s", tracefile.DumpPacket(p.Raw))
			}
			continue
		}
		if pluginSeq == 0 {
			pluginSeq, pid = p.Info.SequenceID, p.Info.TrustedPID
		}
		if p.Info.SequenceID != pluginSeq || p.Info.TrustedPID != pid {
			t.Fatalf("plugin packet on sequence %d pid %d, want %d pid %d", p.Info.SequenceID, p.Info.TrustedPID, pluginSeq, pid)
		}
		i, ok := counterIndex(p.Raw)
		if !ok || i != next {
			t.Fatalf("plugin packet %d (ok=%v), want %d", i, ok, next)
		}
		next++
	}
	if next != 3000 {
		t.Fatalf("%d plugin packets arrived, want 3000", next)
	}
	if pid == 0 || pid == int32(os.Getppid()) {
		t.Fatalf("plugin packets stamped with pid %d (this process is %d)", pid, os.Getpid())
	}
	if res.Stats.FinalFlushOutcome != tracefile.FlushOutcomeSucceeded {
		t.Errorf("final flush outcome %d", res.Stats.FinalFlushOutcome)
	}

	// The plugin refuses a bad config: Run reports it, naming the key.
	bad := cfgtest.LoadYAML(t, fmt.Sprintf(`
buffers: [{size_kb: 64}]
data_sources: [{name: example.counter, plugin: %q, config: {packets: -1}}]
sinks: [{type: file, path: %q}]
`, plugin, filepath.Join(t.TempDir(), "bad.pftrace")))
	s, err := New(bad, Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err = s.Run(t.Context())
	if err != nil {
		t.Fatalf("on_start_error: continue (the default): Run returned %v", err)
	}
	want := fmt.Sprintf("data_sources[0] (%s): ", plugin)
	if len(res.StartErrors) != 1 || !strings.HasPrefix(res.StartErrors[0].Error(), want) || !strings.Contains(res.StartErrors[0].Error(), "data_sources[0].config.packets: must be >= 0") {
		t.Fatalf("bad plugin config: start errors %v, want one starting %q naming data_sources[0].config.packets", res.StartErrors, want)
	}
	t.Logf("start error: %v", res.StartErrors[0])
	if res.Stats.Tracepipe == nil || res.Stats.Tracepipe.DataSourceErrors != 1 {
		t.Fatalf("the start failure is not recorded in the trace stats: %+v", res.Stats.Tracepipe)
	}

	// With on_start_error: abort the session ends and Run says why.
	bad.DataSources[0].OnStartError = config.OnStartErrorAbort
	bad.Sinks[0].Path = filepath.Join(t.TempDir(), "abort.pftrace")
	s, err = New(bad, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "packets") || !strings.Contains(err.Error(), want) {
		t.Fatalf("on_start_error: abort: Run returned %v", err)
	}
}

// counterIndex reads the example plugin's packet index: the seq_value
// (field 2) of its for_testing TestEvent, which must decode whole.
func counterIndex(p []byte) (uint32, bool) {
	event, ok := bytesField(p, tracefile.FieldForTesting)
	if !ok {
		return 0, false
	}
	var index uint32
	found := false
	for len(event) > 0 {
		num, typ, n := protowire.ConsumeTag(event)
		if n < 0 {
			return 0, false
		}
		event = event[n:]
		if num == 2 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(event)
			if n < 0 {
				return 0, false
			}
			index, found = uint32(v), true
		}
		if n = protowire.ConsumeFieldValue(num, typ, event); n < 0 {
			return 0, false
		}
		event = event[n:]
	}
	return index, found
}

// bytesField returns the first length-delimited field num of p.
func bytesField(p []byte, num protowire.Number) ([]byte, bool) {
	for len(p) > 0 {
		n0, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil, false
		}
		p = p[n:]
		if n0 == num && typ == protowire.BytesType {
			b, n := protowire.ConsumeBytes(p)
			return b, n >= 0
		}
		if n = protowire.ConsumeFieldValue(n0, typ, p); n < 0 {
			return nil, false
		}
		p = p[n:]
	}
	return nil, false
}

// plugins.Finite crosses the protocol: a session without a duration ends
// once the plugin's data source is done, with all its packets.
func TestServicePluginFinite(t *testing.T) {
	plugin := counterPlugin(t)
	out := filepath.Join(t.TempDir(), "finite.pftrace")
	s, err := New(cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 0s
buffers: [{size_kb: 4096}]
data_sources:
  - name: example.counter
    plugin: %q
    buffer_exhausted_policy: stall
    config: {packets: 500, size: 100}
sinks: [{type: file, path: %q}]
`, plugin, out)), Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Only the data source's end can stop this session before ctx does.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the session ran until its context ended: the plugin's Done did not reach the service")
	}
	n := 0
	for _, p := range tracetest.ReadTrace(t, out) {
		if i, ok := counterIndex(p.Raw); ok {
			if int(i) != n {
				t.Fatalf("packet %d, want %d", i, n)
			}
			n++
		}
	}
	if n != 500 || res.Stats.FinalFlushOutcome != tracefile.FlushOutcomeSucceeded {
		t.Fatalf("%d packets, final flush %d", n, res.Stats.FinalFlushOutcome)
	}
}

// A plugin data source gets producers.plugin_smb_size_kb, an in-process
// one producers.smb_size_kb. Unset, the plugin's is the larger of
// smb_size_kb and 4 MiB: a config that raised smb_size_kb for its plugins
// (before the key existed) does not see them shrink.
func TestPluginSMBSize(t *testing.T) {
	plugin := syntheticPlugin(t)
	for _, c := range []struct {
		producers          string
		inProcess, plugged int
	}{
		{"", 256 << 10, 4096 << 10},
		{"producers: {smb_size_kb: 64, plugin_smb_size_kb: 512}", 64 << 10, 512 << 10},
		{"producers: {smb_size_kb: 8192}", 8192 << 10, 8192 << 10},
		{"producers: {smb_size_kb: 64}", 64 << 10, 4096 << 10},
	} {
		cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
buffers: [{size_kb: 1024}]
%s
data_sources:
  - name: tracepipe.synthetic
    config: {max_packets: 1}
  - name: tracepipe.synthetic
    plugin: %q
    config: {max_packets: 1}
sinks: [{type: file, path: %q}]
`, c.producers, plugin, filepath.Join(t.TempDir(), "out.pftrace")))
		s, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.producers[0].smb.Size(); got != c.inProcess {
			t.Errorf("%q: in-process SMB %d bytes, want %d", c.producers, got, c.inProcess)
		}
		if got := s.producers[1].smb.Size(); got != c.plugged {
			t.Errorf("%q: plugin SMB %d bytes, want %d", c.producers, got, c.plugged)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := s.Run(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}
