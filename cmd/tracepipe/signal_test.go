package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/tracefile"
)

// childArgsEnv makes the test binary run the CLI with these (JSON) args,
// as the tracepipe binary would (see TestMain).
const childArgsEnv = "TPCLI_TEST_CHILD_ARGS" // not TRACEPIPE_*: those are config overrides

// startCLI starts the CLI in a child process.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	a, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(a))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &stderr
}

// waitFile waits (bounded) for a file to exist: the session set up, its
// signal handler installed.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session never created its output file")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitExit waits (bounded) for the child and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatal("run did not stop within 60 s of the signal")
		return -1
	}
}

// completeTrace checks that a file parses cleanly and ends with a
// TraceStats.
func completeTrace(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := tracefile.ReadAll(f)
	if err != nil {
		t.Fatalf("%s does not parse cleanly: %v", path, err)
	}
	if len(pkts) == 0 {
		t.Fatalf("%s is empty", path)
	}
	if _, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1]); !ok || err != nil {
		t.Fatalf("%s: last packet is not the final TraceStats", path)
	}
}

// The user report: under `timeout`, SIGTERM reaches the process and then
// its group, and the duplicate counted as "abort now" (a 0-byte file). Two
// signals within a second are one request: a graceful stop, exit 0, a
// complete file, and the message saying how to abort.
func TestRunDuplicateSignalIsOneRequest(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dup.pftrace")
	cmd, stderr := startCLI(t, "run", "--duration", "10m", "-o", out)
	waitFile(t, out)
	for range 2 {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	if code := waitExit(t, cmd); code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "stopping… (Ctrl-C again to abort)") {
		t.Errorf("no stop message: %s", stderr)
	}
	completeTrace(t, out)
}

// A second Ctrl-C without write_into_file writes nothing, and the empty
// file the sink had created is removed rather than left to block the next
// run with the same path.
func TestRunAbortRemovesEmptyFile(t *testing.T) {
	dir := t.TempDir()
	out, cfg := filepath.Join(dir, "abort.pftrace"), filepath.Join(dir, "abort.yaml")
	// A plugin hung in Start keeps the graceful stop going for the 5 s
	// stop bound, whenever the first Ctrl-C comes.
	text := fmt.Sprintf(`duration: 10m
buffers: [{size_kb: 1024}]
data_sources:
  - name: tracepipe.synthetic
    config: {writers: 1, rate: 1000}
  - name: fault.source
    plugin: %q
    config: {mode: hang_start}
sinks: [{type: file, path: %q}]
`, faultPlugin(t), out)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, stderr := startCLI(t, "run", cfg)
	waitFile(t, out)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// The second Ctrl-C must come after the window that makes a
	// duplicate signal the same request.
	time.Sleep(sameRequestWindow + 100*time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != exitAborted {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitAborted, stderr)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after the abort (%v); stderr %s", out, err, stderr)
	}
	if !strings.Contains(stderr.String(), "removed "+out+": nothing was written to it") {
		t.Errorf("no removal message: %s", stderr)
	}
}

// The user report: started with & from a script, SIGINT is ignored. A run
// whose parent ignores SIGINT still stops gracefully on it.
func TestRunStopsOnSIGINTWhenStartedIgnoringIt(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bg.pftrace")
	signal.Ignore(syscall.SIGINT) // inherited by the child, as a background job's
	cmd, stderr := startCLI(t, "run", "--duration", "10m", "-o", out)
	signal.Reset(syscall.SIGINT)
	waitFile(t, out)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	completeTrace(t, out)
}

// The first signal stops, a signal within the window is the same
// request, a later one aborts.
func TestStopRequests(t *testing.T) {
	var r stopRequests
	t0 := time.Unix(100, 0)
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{0, sigStop}, {10 * time.Millisecond, sigSame}, {999 * time.Millisecond, sigSame}, {time.Second, sigAbort}, {5 * time.Second, sigAbort}} {
		if got := r.on(t0.Add(c.at)); got != c.want {
			t.Errorf("signal at +%v: action %d, want %d", c.at, got, c.want)
		}
	}
}

// -o - streams the trace to standard output; nothing named "-" appears.
func TestRunOutputToStdout(t *testing.T) {
	dir := t.TempDir()
	a, _ := json.Marshal([]string{"run", "--duration", "300ms", "-o", "-"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(a))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	pkts, err := tracefile.ReadAll(bytes.NewReader(stdout.Bytes()))
	if err != nil || len(pkts) == 0 {
		t.Fatalf("stdout is not a trace: %d packets, %v", len(pkts), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "-")); err == nil {
		t.Error(`a file named "-" was created`)
	}
	if !strings.Contains(stderr.String(), "standard output") {
		t.Errorf("summary does not name standard output: %s", stderr.String())
	}
}

// .gz and .zst names compress; two runs in the same millisecond with
// {timestamp} get distinct files; --version prints a version.
func TestRunNamesAndVersion(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, magic string }{{"t.pftrace.gz", "\x1f\x8b"}, {"t.pftrace.zst", "\x28\xb5\x2f\xfd"}} {
		out := filepath.Join(dir, c.name)
		if _, stderr, code := runCLI(t, "run", "--duration", "200ms", "-o", out); code != exitOK {
			t.Fatalf("%s: exit %d %s", c.name, code, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil || !bytes.HasPrefix(b, []byte(c.magic)) {
			t.Errorf("%s is not compressed as its name says", c.name)
		}
	}
	_, stderr, code := runCLI(t, "run", "--duration", "100ms", "-o", filepath.Join(dir, "x.pftrace.gz"), "--set", "sinks[0].compression=zstd")
	if code != exitError || !strings.Contains(stderr, "implies gzip") {
		t.Errorf("compression mismatch: exit %d %s", code, stderr)
	}
	stdout, _, code := runCLI(t, "--version")
	if code != exitOK || !strings.HasPrefix(stdout, "tracepipe ") {
		t.Errorf("--version: exit %d %q", code, stdout)
	}
}

// A failed sink is on the status line.
func TestStatusLineShowsSinkFailure(t *testing.T) {
	line := statusLine(pipeline.Status{SinkFailures: []string{"sinks[0]: no space left on device"}})
	if !strings.Contains(line, "SINK FAILED sinks[0]: no space left on device") {
		t.Errorf("status line %q", line)
	}
}

// Every rotated file opens alone (`stats` exits 0 on each), and `stats`
// and `inspect` take the set (shell-glob order) as one trace with each
// file's counters.
func TestRotatedFilesOpenAloneAndAsASet(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.pftrace")
	if _, stderr, code := runCLI(t, "run", "--duration", "3s", "-o", out, "--set", "max_file_size=1MiB"); code != exitOK {
		t.Fatalf("run: exit %d %s", code, stderr)
	}
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(out), "t*.pftrace")) // t.pftrace, t.1.pftrace, ...
	if len(files) < 2 {
		t.Fatalf("%d files: no rotation", len(files))
	}
	for _, f := range files {
		if stdout, stderr, code := runCLI(t, "stats", f); code != exitOK {
			t.Errorf("stats %s: exit %d\n%s%s", f, code, stdout, stderr)
		}
	}
	stdout, stderr, code := runCLI(t, append([]string{"stats"}, files...)...)
	if code != exitOK {
		t.Fatalf("stats on the set: exit %d %s", code, stderr)
	}
	if strings.Count(stdout, "\nfile ")+1 < len(files) || !strings.Contains(stdout, "its last TraceStats: sink_packets_written") ||
		!strings.Contains(stdout, "set of "+strconv.Itoa(len(files))+" files") {
		t.Errorf("stats on the set:\n%s", stdout)
	}
	stdout, _, code = runCLI(t, append([]string{"inspect", "-n", "0"}, files...)...)
	if code != exitOK || !strings.Contains(stdout, "trace set of "+strconv.Itoa(len(files))+" files") {
		t.Errorf("inspect on the set: exit %d\n%s", code, stdout)
	}
}
