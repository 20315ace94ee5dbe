package main

import (
	"strings"
	"testing"
)

// run --max-memory bounds the session's buffers and SMBs: the embedded
// default config (17.75 MiB) is refused under 1 MiB with the figures, and
// a malformed bound is a usage error naming the flag.
func TestRunMaxMemory(t *testing.T) {
	_, stderr, code := runCLI(t, "run", "--max-memory", "1MiB", "-o", t.TempDir()+"/t.pftrace", "--duration", "1s")
	if code != 1 || !strings.Contains(stderr, "buffers:") || !strings.Contains(stderr, "more than 1.0 MiB") {
		t.Fatalf("exit %d, stderr %q: want exit 1 naming the buffers and the 1 MiB bound", code, stderr)
	}
	_, stderr, code = runCLI(t, "run", "--max-memory", "lots")
	if code != 2 || !strings.Contains(stderr, "--max-memory") {
		t.Fatalf("exit %d, stderr %q: want a usage error (2) naming --max-memory", code, stderr)
	}
	_, stderr, code = runCLI(t, "serve", "--perfetto", "--max-consumer-memory", "-5")
	if code != 2 || !strings.Contains(stderr, "--max-consumer-memory") {
		t.Fatalf("exit %d, stderr %q: want a usage error (2) naming --max-consumer-memory", code, stderr)
	}
}

// validate --print of a text config says why it has no YAML form, without
// claiming producer filters the file does not have, and points at
// validate without --print, which passes.
func TestValidatePrintTextConfig(t *testing.T) {
	path := writeFile(t, "t.pbtxt", []byte("buffers { size_kb: 1024 }\ndata_sources { config { name: \"linux.sys_stats\" } }\nduration_ms: 1000\n"))
	_, stderr, code := runCLI(t, "validate", "--print", path)
	if code != 2 || !strings.Contains(stderr, "no faithful YAML form") || !strings.Contains(stderr, "without --print") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, stderr, code := runCLI(t, "validate", path); code != 0 {
		t.Fatalf("validate without --print: exit %d, stderr %q", code, stderr)
	}
}
