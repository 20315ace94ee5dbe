package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openPTY returns the two ends of a new pseudo-terminal: the secondary
// end is a terminal (term.IsTerminal), as a user's shell gives a program.
func openPTY(t *testing.T) (primary, secondary *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		m.Close()
		t.Fatalf("unlockpt: %v", e)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile("/dev/pts/"+itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open pts: %v", err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

// `-o -` on a terminal dumped hundreds of KiB of binary into it: refused,
// as a usage error saying what to do. (Redirected, it streams: the file
// sink tests and TestRunOutputToStdout cover that.)
func TestRunRefusesBinaryOutputToTerminal(t *testing.T) {
	_, tty := openPTY(t)
	var stderr bytes.Buffer
	code := run([]string{"run", "--duration", "1s", "-o", "-"}, tty, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "refusing to write a binary trace to the terminal") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	// The same through a config's file section.
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte("duration: 1s\nbuffers: [{size_kb: 1024}]\ndata_sources: [{name: linux.sys_stats}]\nsinks: [{type: file, file: {path: \"-\"}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{"run", "-c", cfg}, tty, &stderr); code != exitUsage {
		t.Fatalf("config with path \"-\": exit %d, stderr %q", code, stderr.String())
	}
}

// Off a terminal, stderr holds text only: the "\r\x1b[K" that cleared
// run's status line was written into log files too.
func TestRunStderrWithoutControlSequencesOffTerminal(t *testing.T) {
	out := filepath.Join(t.TempDir(), "plain.pftrace")
	cmd, stderr := startCLI(t, "run", "--duration", "10m", "-o", out)
	waitFile(t, out)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd); code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "stopping…") {
		t.Errorf("no stop message: %q", stderr)
	}
	if strings.ContainsAny(stderr.String(), "\r\x1b") {
		t.Errorf("control characters in stderr that is not a terminal: %q", stderr)
	}
}

// runFullStdout runs the CLI in a child process whose standard output is
// /dev/full, so that `-o -` fails with ENOSPC as a full disk does.
func runFullStdout(t *testing.T, args ...string) (int, string) {
	t.Helper()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	a, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(a))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return waitExit(t, cmd), stderr.String()
}

// A full disk was reported four times (the sink's warning, the service's
// "session stopped" warning, the summary, the exit error). Now once as it
// happens and once in the sink's summary line; the exit error names the
// sink only. With --log-format json the warning's facts are fields.
func TestDiskFullReportedOnce(t *testing.T) {
	code, stderr := runFullStdout(t, "run", "--duration", "1m", "-o", "-")
	if code != exitError {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if n := strings.Count(stderr, "no space left on device"); n != 2 {
		t.Errorf("the disk-full error appears %d times, want 2 (warning, summary):\n%s", n, stderr)
	}
	for _, want := range []string{"; stopping the session (on_error: stop)\n", "sinks[0]: FAILED: ",
		"tracepipe: sink sinks[0] failed (its summary line above says why); the session stopped (on_error: stop)\n"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	code, stderr = runFullStdout(t, "run", "--duration", "1m", "-o", "-", "--log-format", "json")
	if code != exitError {
		t.Fatalf("json: exit %d, stderr:\n%s", code, stderr)
	}
	found := false
	for _, line := range strings.Split(stderr, "\n") {
		var rec struct {
			Level, Msg string
			Detail     map[string]any
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Level != "WARN" {
			continue
		}
		found = rec.Detail["sink"] == "sinks[0]" && strings.Contains(rec.Detail["error"].(string), "no space left on device") && rec.Detail["stops_session"] == true
	}
	if !found {
		t.Errorf("no JSON warning with the sink's facts as fields:\n%s", stderr)
	}
}

// On a terminal the status line is drawn and cleared with "\r\x1b[K", and
// the summary starts on a clean line.
func TestRunStatusLineOnTerminal(t *testing.T) {
	m, tty := openPTY(t)
	got := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				got <- b.String()
				return
			}
		}
	}()
	out := filepath.Join(t.TempDir(), "tty.pftrace")
	var stdout bytes.Buffer
	if code := run([]string{"run", "--duration", "1s", "-o", out}, &stdout, tty); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	tty.Close() // the reader sees EIO once the last secondary is closed
	text := <-got
	if !strings.Contains(text, "\r\x1b[K") || !strings.Contains(text, "\x1b[Ktracepipe: sinks[0]: wrote") {
		t.Errorf("terminal output without the status line's clearing: %q", text)
	}
}
