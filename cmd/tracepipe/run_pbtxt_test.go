package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
