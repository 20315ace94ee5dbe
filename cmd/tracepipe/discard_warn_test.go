package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A discard buffer in a streaming session stops for good once full,
// read or not (TraceBuffer V2); validate and run say so, naming the
// field, and still accept the config.
func TestDiscardWithStreamingIsWarnedAbout(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.pftrace")
	cfg := filepath.Join(dir, "discard.yaml")
	body := `duration: 300ms
write_into_file: true
file_write_period: 100ms
buffers:
  - size_kb: 1024
  - size_kb: 256
    fill_policy: discard
data_sources:
  - name: tracepipe.synthetic
    config: {rate: 1000}
sinks:
  - type: file
    path: ` + out + "\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	const want = "tracepipe: warning: buffers[1].fill_policy: discard with write_into_file: the buffer stops accepting data for good once 256 KiB"
	stdout, stderr, code := runCLI(t, "validate", cfg)
	if code != exitOK || !strings.Contains(stdout, "config OK") || !strings.Contains(stderr, want) || strings.Contains(stderr, "buffers[0]") {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q; want the warning for buffers[1] only", code, stdout, stderr)
	}
	_, stderr, code = runCLI(t, "run", cfg)
	if code != exitOK || !strings.Contains(stderr, want) {
		t.Fatalf("run: exit %d, stderr %q; want the warning", code, stderr)
	}
	// Without streaming a discard buffer does what it says: no warning.
	_, stderr, code = runCLI(t, "validate", cfg, "--set", "write_into_file=false")
	if code != exitOK || strings.Contains(stderr, "warning") {
		t.Fatalf("validate without streaming: exit %d, stderr %q", code, stderr)
	}
}
