package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
)

// `tracepipe run -c x.pbtxt` reads a Perfetto text config: a field
// tracepipe does not support is refused by name before anything starts,
// and --set (whose keys are tracepipe's YAML keys) is a usage error.
func TestRunTextConfigRefusesByName(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "trace.pbtxt")
	text := "buffers { size_kb: 1024 }\ndata_sources { config { name: \"linux.sys_stats\" } }\nduration_ms: 500\nbugreport_score: 10\n"
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "t.pftrace")
	_, stderr, code := runCLI(t, "run", "-c", cfg, "-o", out)
	if code == exitOK || !strings.Contains(stderr, "not supported by tracepipe: bugreport_score (line 4)") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a trace file was created for a refused config")
	}
	_, stderr, code = runCLI(t, "run", cfg, "--set", "duration=1s")
	if code != exitUsage || !strings.Contains(stderr, "--set duration=1s") {
		t.Fatalf("--set with a text config: exit %d, stderr %q", code, stderr)
	}
}

// `tracepipe validate` checks a text config as run loads it.
func TestValidateTextConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.textproto")
	if err := os.WriteFile(good, []byte("buffers { size_kb: 1024 }\ndata_sources { config { name: \"linux.sys_stats\" sys_stats_config { meminfo_period_ms: 100 } } }\nduration_ms: 500\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "validate", good)
	if code != exitOK || !strings.Contains(stdout, "config OK: 1 buffers, 1 data sources, 1 sinks") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	bad := filepath.Join(dir, "bad.cfg")
	if err := os.WriteFile(bad, []byte("buffers { size_kb: 1024 }\ndata_sources { config { name: \"linux.sys_stats\" sys_stats_config { meminfo_perid_ms: 100 } } }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runCLI(t, "validate", bad)
	if code == exitOK || !strings.Contains(stderr, "bad.cfg:2:") || !strings.Contains(stderr, "meminfo_perid_ms") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, _, code = runCLI(t, "validate", good, "--print"); code != exitUsage {
		t.Fatalf("--print with a text config: exit %d", code)
	}
}

// `tracepipe run -c` with a golden capture's text config (capture a:
// linux.sys_stats with counters, DISCARD buffer, 2 s): run listens on
// PERFETTO_PRODUCER_SOCK_NAME, waits for the producer that registers the
// data source, binds it, runs the session (shortened by --duration) and
// writes its trace. The producer here only registers (it never asks for
// commands, so it writes nothing): what this proves is the command's path,
// not the data (TestTraceConfigTextRunsGoldenConfigs in pipeline runs
// every golden config with producers that write).
func TestRunGoldenTextConfig(t *testing.T) {
	cfg := filepath.Join(testsupport.GoldenDir(t, "perfetto-ipc", "a_probes"), "trace_config.pbtxt")
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", sock)
	out := filepath.Join(dir, "a.pftrace")
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := registerProducer(t, sock, "test.probes", "linux.sys_stats")
		<-t.Context().Done()
		c.Close()
	}()
	_, stderr, code := runCLI(t, "run", "-c", cfg, "--duration", "300ms", "-o", out)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stderr, "linux.sys_stats") || !strings.Contains(stderr, "test.probes") {
		t.Errorf("the log does not show the producer serving linux.sys_stats: %q", stderr)
	}
	pkts := tracetest.ReadAll(t, out)
	if len(pkts) == 0 {
		t.Fatal("empty trace")
	}
}

// A text config's data source that a built-in also serves waits for a
// producer (perfetto.wait_for_producers, settable with --set), then the
// built-in stands in, and the log says which of the DataSourceConfig's
// settings it does not read.
func TestRunTextConfigBuiltinStandsIn(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", filepath.Join(dir, "producer.sock"))
	cfg := filepath.Join(dir, "sys.pbtxt")
	text := "buffers { size_kb: 1024 }\ndata_sources { config { name: \"linux.sys_stats\" sys_stats_config { meminfo_period_ms: 100 } } }\nduration_ms: 300\n"
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "t.pftrace")
	_, stderr, code := runCLI(t, "run", "-c", cfg, "-o", out, "--set", "perfetto.wait_for_producers=100ms")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"no producer registered linux.sys_stats within 100ms", "does not read the DataSourceConfig's sys_stats_config"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q: %q", want, stderr)
		}
	}
	if len(tracetest.ReadAll(t, out)) == 0 {
		t.Fatal("empty trace")
	}
	_, stderr, code = runCLI(t, "run", "-c", cfg, "-o", out+"2", "--set", "perfetto.wait_for_producrs=1s")
	if code == exitOK || !strings.Contains(stderr, "perfetto.wait_for_producrs") {
		t.Fatalf("a misspelt perfetto key: exit %d, stderr %q", code, stderr)
	}
}
