package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	faultPluginOnce sync.Once
	faultPluginPath string
	faultPluginErr  error
)

// faultPlugin builds plugins/internal/faultplugin (a plugin that
// misbehaves on purpose, by config) once per test binary.
func faultPlugin(t *testing.T) string {
	t.Helper()
	faultPluginOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		dir, err := os.MkdirTemp("", "tracepipe-cmd-faultplugin-")
		if err != nil {
			faultPluginErr = err
			return
		}
		faultPluginPath = filepath.Join(dir, "faultplugin")
		cmd := exec.Command(goBin, "build", "-o", faultPluginPath, "../../plugins/internal/faultplugin")
		if out, err := cmd.CombinedOutput(); err != nil {
			faultPluginErr = fmt.Errorf("building the fault plugin: %v\n%s", err, out)
		}
	})
	if faultPluginErr != nil {
		t.Fatal(faultPluginErr)
	}
	return faultPluginPath
}

// hungFlushConfig writes a config recording an in-process source and a
// plugin whose Flush never returns, for 10 minutes, streamed to the file
// but never flushed before the end (so the final flush is the one that
// hangs, up to flushTimeout).
func hungFlushConfig(t *testing.T, flushTimeout time.Duration) (cfg, out string) {
	dir := t.TempDir()
	out = filepath.Join(dir, "hung.pftrace")
	cfg = filepath.Join(dir, "hung.yaml")
	text := fmt.Sprintf(`duration: 10m
flush_timeout: %v
write_into_file: true
file_write_period: 100ms
flush_period: 10m
buffers: [{size_kb: 4096}]
data_sources:
  - name: fault.source
    plugin: %q
    config: {mode: hang_flush, packets: 100}
  - name: tracepipe.synthetic
    config: {writers: 1, rate: 1000}
sinks: [{type: file, path: %q}]
`, flushTimeout, faultPlugin(t), out)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, out
}

// waitPluginPackets waits (bounded) until the plugin's first packets are
// in the streamed file: the plugin runs, and the session is recording.
func waitPluginPackets(t *testing.T, path string) {
	t.Helper()
	// TestEvent{str: "fault", seq_value: ...} as the fault plugin encodes it.
	marker := []byte("\x0a\x05fault\x10")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, marker) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the plugin's packets never reached the file")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ctrl-C with a plugin hung in Flush: the session stops within
// flush_timeout + the stop bound (5 s) + teardown, exit 0, with a
// complete trace.
func TestRunCtrlCWithHungPlugin(t *testing.T) {
	const flushTimeout = 2 * time.Second
	cfg, out := hungFlushConfig(t, flushTimeout)
	cmd, stderr := startCLI(t, "run", "-c", cfg)
	waitPluginPackets(t, out)
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, cmd)
	elapsed := time.Since(start)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	bound := flushTimeout + 5*time.Second + 2*time.Second
	t.Logf("stopped %v after Ctrl-C (bound %v)", elapsed.Round(time.Millisecond), bound)
	if elapsed > bound {
		t.Errorf("stopped %v after Ctrl-C, more than flush_timeout + stop bound + teardown = %v", elapsed, bound)
	}
	completeTrace(t, out)
}

// A second Ctrl-C ends at once even while the final flush waits for a
// hung plugin (flush_timeout 60 s here: the graceful stop would take that
// long).
func TestRunSecondCtrlCAbortsDespiteHungPlugin(t *testing.T) {
	const flushTimeout = 60 * time.Second
	cfg, out := hungFlushConfig(t, flushTimeout)
	cmd, stderr := startCLI(t, "run", "-c", cfg)
	waitPluginPackets(t, out)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// A signal within sameRequestWindow of the first is the same request
	// (a duplicate from `timeout` or the process group): the second
	// Ctrl-C must come after it.
	time.Sleep(sameRequestWindow + 100*time.Millisecond)
	second := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, cmd)
	elapsed := time.Since(second)
	if code != exitAborted {
		t.Fatalf("exit %d after the second Ctrl-C, want %d; stderr %s", code, exitAborted, stderr)
	}
	t.Logf("ended %v after the second Ctrl-C", elapsed.Round(time.Millisecond))
	if elapsed > flushTimeout/4 {
		t.Errorf("ended %v after the second Ctrl-C: it waited for the hung plugin", elapsed)
	}
	if !strings.Contains(stderr.String(), "again: aborting") {
		t.Errorf("no abort message: %s", stderr)
	}
}
