package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run --perfetto listens on PERFETTO_PRODUCER_SOCK_NAME and, when no
// producer registers a data source the config names, fails after
// perfetto.wait_for_producers naming it and the socket.
func TestRunPerfettoNamesMissingProducer(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", sock)
	cfg := writeFile(t, "cfg.yaml", []byte(`
duration: 1s
buffers: [{size_kb: 1024}]
perfetto: {wait_for_producers: 200ms}
data_sources: [{name: app.custom_source}]
sinks: [{type: file, path: `+filepath.Join(dir, "out.pftrace")+`}]
`))
	_, stderr, code := runCLI(t, "run", "--perfetto", "-c", cfg)
	if code != exitError || !strings.Contains(stderr, "no producer registered app.custom_source within 200ms") || !strings.Contains(stderr, sock) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	// Without --perfetto the name is simply unknown.
	_, stderr, code = runCLI(t, "run", "-c", cfg)
	if code != exitError || !strings.Contains(stderr, "unknown data source") {
		t.Fatalf("without --perfetto: exit %d, stderr %q", code, stderr)
	}
}
