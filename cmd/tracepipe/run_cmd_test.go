package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/tracefile"
)

// `tracepipe run` on the embedded default config (shortened) records a
// trace that `tracepipe stats` and `inspect` read, with every BufferStats
// counter reported.
func TestRunEmbeddedDefaultThenStats(t *testing.T) {
	out := filepath.Join(t.TempDir(), "default.pftrace")
	_, stderr, code := runCLI(t, "run", "--duration", "700ms", "-o", out)
	if code != exitOK {
		t.Fatalf("run: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stderr, "wrote ") || !strings.Contains(stderr, out) {
		t.Errorf("run summary missing: %q", stderr)
	}
	st, err := os.Stat(out)
	if err != nil || st.Size() == 0 {
		t.Fatalf("trace file: %v", err)
	}
	stdout, stderr, code := runCLI(t, "stats", "--fail-on-loss", out)
	if code != exitOK {
		t.Fatalf("stats --fail-on-loss on the default session: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, name := range []string{"buffer_size", "bytes_written", "bytes_overwritten", "bytes_read", "padding_bytes_written",
		"padding_bytes_cleared", "chunks_written", "chunks_rewritten", "chunks_relocated", "chunks_overwritten",
		"chunks_discarded", "chunks_read", "chunks_committed_out_of_order", "write_wrap_count", "patches_succeeded",
		"patches_failed", "readaheads_succeeded", "readaheads_failed", "abi_violations", "trace_writer_packet_loss"} {
		if strings.Count(stdout, " "+name+" ") < 2 { // two buffers in the default config (chunks_discarded is also a service counter)
			t.Errorf("stats does not report %s for both buffers", name)
		}
	}
	stdout, _, code = runCLI(t, "inspect", out)
	for _, kind := range []string{"process_tree", "sys_stats", "track_event", "trace_stats"} {
		if !strings.Contains(stdout, kind) {
			t.Errorf("inspect shows no %s packets", kind)
		}
	}
	if code != exitOK {
		t.Errorf("inspect: exit %d", code)
	}
}

// -o never overwrites an existing file; bad --set and bad configs fail
// with the field named.
func TestRunErrors(t *testing.T) {
	existing := filepath.Join(t.TempDir(), "exists.pftrace")
	if err := os.WriteFile(existing, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "run", "--duration", "100ms", "-o", existing)
	if code != exitError || !strings.Contains(stderr, "exists") {
		t.Errorf("existing output: exit %d, stderr %q", code, stderr)
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep" {
		t.Error("existing file was modified")
	}
	_, stderr, code = runCLI(t, "run", "--set", "buffers[0].size_kb=3")
	if code != exitError || !strings.Contains(stderr, "buffers[0].size_kb") {
		t.Errorf("bad size: exit %d, stderr %q", code, stderr)
	}
	_, _, code = runCLI(t, "run", "--set", "novalue")
	if code != exitUsage {
		t.Errorf("--set without '=': exit %d, want %d", code, exitUsage)
	}
}

// SIGINT stops a running session gracefully: run returns 0 and the file
// is complete, ending with the final TraceStats packet.
func TestRunStopsGracefullyOnSIGINT(t *testing.T) {
	out := filepath.Join(t.TempDir(), "interrupted.pftrace")
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		stdout, stderr, code := runCLI(t, "run", "--duration", "10m", "-o", out)
		done <- result{code, stdout, stderr}
	}()
	// The output file exists once the session is set up, which is after
	// run installed its signal handler.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(out); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session never created its output file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop within 30 s of SIGINT")
	}
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := tracefile.ReadAll(f)
	if err != nil {
		t.Fatalf("interrupted trace does not parse cleanly: %v", err)
	}
	if len(pkts) < 10 {
		t.Fatalf("only %d packets", len(pkts))
	}
	if _, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1]); !ok || err != nil {
		t.Fatalf("last packet is not the final TraceStats (ok=%v, err=%v)", ok, err)
	}
}
