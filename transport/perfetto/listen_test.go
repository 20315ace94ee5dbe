package perfetto

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/config"
)

// The log line naming the producer socket says where the path came from:
// perfetto.producer_socket, PERFETTO_PRODUCER_SOCK_NAME, or the default
// (it said PERFETTO_PRODUCER_SOCK_NAME whichever it was).
func TestProducerSocketSource(t *testing.T) {
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", "")
	if got := producerSocketSource(config.PerfettoConfig{ProducerSocket: "/x.sock"}); !strings.Contains(got, "perfetto.producer_socket") {
		t.Errorf("configured: %q", got)
	}
	if got := producerSocketSource(config.PerfettoConfig{}); !strings.Contains(got, "default") {
		t.Errorf("default: %q", got)
	}
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", "/y.sock")
	if got := producerSocketSource(config.PerfettoConfig{}); !strings.Contains(got, "PERFETTO_PRODUCER_SOCK_NAME") {
		t.Errorf("environment: %q", got)
	}
}

// TestListenForSessionNamesMissingProducers: a data source no built-in
// serves is required; when no producer registers it within
// perfetto.wait_for_producers the error names it and the bound, and the
// socket is closed and removed. A config of built-ins only waits for
// nothing and leaves the socket listening.
func TestListenForSessionNamesMissingProducers(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	load := func(sources string) *config.Config {
		t.Helper()
		path := filepath.Join(dir, "session.yaml")
		text := "duration: 1s\nbuffers: [{size_kb: 1024}]\nperfetto: {enabled: true, wait_for_producers: 100ms, producer_socket: " + sock + "}\n" +
			"data_sources: " + sources + "\nsinks: [{type: file, path: " + filepath.Join(dir, "out.pftrace") + "}]\n"
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(config.LoadOptions{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	_, _, err := ListenForSession(context.Background(), load("[{name: app.custom_source}, {name: linux.sys_stats}]"), nil)
	if err == nil || !strings.Contains(err.Error(), "no producer registered app.custom_source within 100ms (perfetto.wait_for_producers)") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}

	reg, host, err := ListenForSession(context.Background(), load("[{name: linux.sys_stats}]"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if reg == nil || len(reg.DataSources()) != 0 {
		t.Errorf("producers %v", reg)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the socket is not there: %v", err)
	}
}
