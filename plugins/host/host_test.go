package host

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/smb"
)

func newSMB(t *testing.T, size, pageSize int) *smb.SMB {
	t.Helper()
	s, err := smb.NewMemfdSMB("tracepipe-host-test", size, pageSize)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

func TestCounterPluginEndToEnd(t *testing.T) {
	path := counterPlugin(t)
	for _, tc := range []struct {
		name          string
		packets, size int
		smbSize, page int
		slow          bool // OnCommit sleeps: backpressure must stall the writer, not lose packets
	}{
		// 2000 small packets wrap a 16-chunk SMB many times.
		{"small", 2000, 64, 64 << 10, 4096, false},
		// Packets bigger than a chunk are fragmented across chunks.
		{"fragmented", 200, 10000, 128 << 10, 8192, false},
		{"none", 0, 64, 64 << 10, 4096, false},
		{"slow consumer", 3000, 200, 16 << 10, 4096, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shm := newSMB(t, tc.smbSize, tc.page)
			defer shm.Close()
			c := newConsumer(shm, tc.packets)
			onCommit := c.OnCommit
			if tc.slow {
				onCommit = func(b []byte) {
					time.Sleep(2 * time.Millisecond)
					c.OnCommit(b)
				}
			}
			var stderr testsupport.LockedBuffer
			p, err := Launch(context.Background(), Config{
				Path:             path,
				Name:             "example.counter",
				DataSourceConfig: map[string]any{"packets": float64(tc.packets), "size": tc.size},
				SMB:              shm,
				TargetBuffer:     3,
				Policy:           smb.Stall,
				OnCommit:         onCommit,
				Stderr:           &stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			if p.Pid() <= 0 || p.Pid() == os.Getpid() {
				t.Fatalf("Pid() = %d, want the child's pid", p.Pid())
			}
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			if tc.packets > 0 {
				select {
				case <-c.full:
				case <-time.After(60 * time.Second):
					got, _, errs, _ := c.snapshot()
					t.Fatalf("read %d of %d packets in 60s; errors %v; stderr:\n%s", len(got), tc.packets, errs, stderr.String())
				}
			}
			if err := p.ClearIncrementalState(); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(7); err != nil {
				t.Fatal(err)
			}
			select {
			case id := <-c.flushed:
				if id != 7 {
					t.Fatalf("flush ack %d, want 7", id)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no commit with FlushRequestID 7 within 10s")
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, p.Done(), time.Second, "Done after Stop")
			if err := p.Err(); err != nil {
				t.Fatalf("Err after a clean Stop: %v", err)
			}

			if out := stderr.String(); strings.Contains(out, "DATA RACE") || strings.Contains(out, "panic") {
				t.Errorf("plugin stderr:\n%s", out)
			}
			got, flushIDs, errs, rejected := c.snapshot()
			for _, err := range errs {
				t.Error(err)
			}
			if rejected != 0 {
				t.Errorf("reader rejected %d chunks", rejected)
			}
			if len(flushIDs) != 1 || flushIDs[0] != 7 {
				t.Errorf("flush ids %v, want [7]", flushIDs)
			}
			if len(got) != tc.packets {
				t.Fatalf("got %d packets, want %d", len(got), tc.packets)
			}
			var ts uint64
			for i, pkt := range got {
				var err error
				if ts, err = checkCounterPacket(pkt, i, tc.size, ts); err != nil {
					t.Fatal(err)
				}
			}
			// Calls after Stop fail instead of hanging or panicking.
			if err := p.Flush(8); err == nil {
				t.Error("Flush after Stop succeeded")
			}
			p.Kill()
			p.Kill()
		})
	}
}

func TestLaunchErrors(t *testing.T) {
	path := counterPlugin(t)
	for _, tc := range []struct {
		name   string
		source string
		config map[string]any
		want   []string
	}{
		{"unknown source", "no.such.source", nil, []string{path, `"no.such.source"`, "example.counter"}},
		{"negative packets", "example.counter", map[string]any{"packets": -1}, []string{path, "packets: must be >= 0"}},
		{"unknown key", "example.counter", map[string]any{"pakets": 5}, []string{path, "pakets: unknown key"}},
		{"fractional size", "example.counter", map[string]any{"size": 6.5}, []string{path, "size: must be an integer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shm := newSMB(t, 64<<10, 4096)
			defer shm.Close()
			before := time.Now()
			p, err := Launch(context.Background(), Config{
				Path: path, Name: tc.source, DataSourceConfig: tc.config, SMB: shm,
				OnCommit: func([]byte) { t.Error("OnCommit called") },
			})
			if err == nil {
				p.Kill()
				t.Fatal("Launch succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if d := time.Since(before); d > 10*time.Second {
				t.Errorf("Launch took %v", d)
			}
		})
	}
}

func TestNotAPlugin(t *testing.T) {
	dir := t.TempDir()
	// A script that never speaks the handshake and whose own child keeps
	// stdout open: the process group kill must end both.
	hang := filepath.Join(dir, "hang.sh")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nsleep 60\necho done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.sh")
	if err := os.WriteFile(garbage, []byte("#!/bin/sh\necho hello world\nsleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want string
	}{
		{"/bin/true", "handshake"},
		{hang, "handshake"},
		{garbage, "handshake"},
		{filepath.Join(dir, "missing"), "handshake"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			shm := newSMB(t, 64<<10, 4096)
			defer shm.Close()
			before := time.Now()
			p, err := Launch(context.Background(), Config{
				Path: tc.path, Name: "example.counter", SMB: shm,
				OnCommit:     func([]byte) {},
				StartTimeout: time.Second,
			})
			took := time.Since(before)
			if err == nil {
				p.Kill()
				t.Fatal("Launch succeeded")
			}
			t.Logf("%v (%v)", err, took)
			if !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q should name %q and say %q", err, tc.path, tc.want)
			}
			if took > 5*time.Second {
				t.Errorf("Launch took %v with a 1s start timeout", took)
			}
		})
	}
}

func TestLaunchContextCancel(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "hang.sh")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	shm := newSMB(t, 64<<10, 4096)
	defer shm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	before := time.Now()
	_, err := Launch(ctx, Config{Path: hang, Name: "x", SMB: shm, OnCommit: func([]byte) {}})
	if err == nil || !strings.Contains(err.Error(), "handshake") {
		t.Fatalf("err = %v, want a handshake error", err)
	}
	if d := time.Since(before); d > 3*time.Second {
		t.Fatalf("Launch took %v under a 300ms context", d)
	}
}

// goroutinesSettle waits for the goroutine count to come back to base.
func goroutinesSettle(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines, %d before the plugin:\n%s", n, base, buf)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestChildDiesMidStream(t *testing.T) {
	path := counterPlugin(t)
	for _, how := range []string{"Kill", "SIGKILL"} {
		t.Run(how, func(t *testing.T) {
			shm := newSMB(t, 64<<10, 4096)
			defer shm.Close()
			base := runtime.NumGoroutine()
			c := newConsumer(shm, 1000)
			p, err := Launch(context.Background(), Config{
				Path:             path,
				Name:             "example.counter",
				DataSourceConfig: map[string]any{"packets": 100000},
				SMB:              shm,
				Policy:           smb.Stall,
				OnCommit:         c.OnCommit,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			waitClosed(t, c.full, 30*time.Second, "first 1000 packets")
			switch how {
			case "Kill":
				p.Kill()
			case "SIGKILL":
				// A crash the host did not cause.
				if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			waitClosed(t, p.Done(), 10*time.Second, "commit stream end")
			if p.Err() == nil {
				t.Error("Err() is nil after the child died mid-stream")
			}
			for name, call := range map[string]func() error{
				"Start":                 p.Start,
				"Flush":                 func() error { return p.Flush(1) },
				"ClearIncrementalState": p.ClearIncrementalState,
				"Stop":                  p.Stop,
			} {
				done := make(chan error, 1)
				go func() { done <- call() }()
				select {
				case err := <-done:
					if err == nil {
						t.Errorf("%s succeeded on a dead child", name)
					} else if !strings.Contains(err.Error(), path) {
						t.Errorf("%s: error %q does not name the plugin", name, err)
					}
				case <-time.After(15 * time.Second):
					t.Fatalf("%s hung on a dead child", name)
				}
			}
			p.Kill()
			got, _, errs, rejected := c.snapshot()
			for _, err := range errs {
				t.Error(err)
			}
			if rejected != 0 {
				t.Errorf("reader rejected %d chunks", rejected)
			}
			// What arrived before the end is an exact prefix.
			var ts uint64
			for i, pkt := range got {
				var err error
				if ts, err = checkCounterPacket(pkt, i, 64, ts); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) >= 100000 {
				t.Errorf("all %d packets arrived: the child was not killed mid-stream", len(got))
			}
			goroutinesSettle(t, base)
		})
	}
}

// TestStderrAndFdPassThroughWrapper launches the plugin through a shell
// wrapper: the wrapper's stderr reaches Config.Stderr, and the SMB fd and
// handshake environment survive the exec.
func TestStderrAndFdPassThroughWrapper(t *testing.T) {
	path := counterPlugin(t)
	wrapper := filepath.Join(t.TempDir(), "wrapper.sh")
	script := "#!/bin/sh\necho 'hello from the wrapper' >&2\nexec " + path + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	shm := newSMB(t, 64<<10, 4096)
	defer shm.Close()
	c := newConsumer(shm, 10)
	var stderr testsupport.LockedBuffer
	p, err := Launch(context.Background(), Config{
		Path: wrapper, Name: "example.counter", DataSourceConfig: map[string]any{"packets": 10},
		SMB: shm, Policy: smb.Stall, OnCommit: c.OnCommit, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c.full, 30*time.Second, "10 packets")
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if out := stderr.String(); !strings.Contains(out, "hello from the wrapper") {
		t.Errorf("stderr %q lacks the wrapper's line", out)
	}
}

// TestFlushBeforeStartAndStopWithoutStart: a flush is acknowledged even
// before the data source started, and Stop without Start ends cleanly.
func TestFlushBeforeStartAndStopWithoutStart(t *testing.T) {
	path := counterPlugin(t)
	shm := newSMB(t, 64<<10, 4096)
	defer shm.Close()
	c := newConsumer(shm, 1)
	p, err := Launch(context.Background(), Config{Path: path, Name: "example.counter", SMB: shm, OnCommit: c.OnCommit})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Flush(3); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-c.flushed:
		if id != 3 {
			t.Fatalf("flush ack %d, want 3", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no flush ack before Start")
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, p.Done(), time.Second, "Done after Stop")
	if got, _, errs, _ := c.snapshot(); len(got) != 0 || len(errs) != 0 {
		t.Fatalf("packets %d, errors %v; want none", len(got), errs)
	}
}

// TestHungChild: a stopped (SIGSTOP) child makes calls fail by their
// deadline, Stop ends it anyway, and Kill works on it.
func TestHungChild(t *testing.T) {
	path := counterPlugin(t)
	defer func(d time.Duration) { rpcTimeout = d }(rpcTimeout)
	rpcTimeout = 500 * time.Millisecond
	for _, end := range []string{"Stop", "Kill"} {
		t.Run(end, func(t *testing.T) {
			shm := newSMB(t, 64<<10, 4096)
			defer shm.Close()
			base := runtime.NumGoroutine()
			c := newConsumer(shm, 1)
			p, err := Launch(context.Background(), Config{Path: path, Name: "example.counter", SMB: shm, OnCommit: c.OnCommit})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// kill(2) only queues the signal: wait until every thread of
			// the child is actually stopped, or it may still answer.
			waitStopped(t, p.Pid())
			before := time.Now()
			if err := p.Start(); err == nil {
				t.Fatal("Start on a stopped child succeeded")
			}
			if d := time.Since(before); d > 3*time.Second {
				t.Fatalf("Start took %v with a 500ms RPC timeout", d)
			}
			before = time.Now()
			switch end {
			case "Stop":
				if err := p.Stop(); err == nil {
					t.Fatal("Stop on a stopped child succeeded")
				}
			case "Kill":
				p.Kill()
			}
			if d := time.Since(before); d > 8*time.Second {
				t.Fatalf("%s took %v on a stopped child", end, d)
			}
			waitClosed(t, p.Done(), 5*time.Second, "commit stream end")
			if err := syscall.Kill(p.Pid(), 0); err == nil {
				t.Errorf("child %d still exists after %s", p.Pid(), end)
			}
			goroutinesSettle(t, base)
		})
	}
}

// waitStopped waits until /proc/PID/stat reports the process stopped
// (state T), failing the test after 5 s.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the ")" that ends the command name.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d not stopped 5 s after SIGSTOP: %s", pid, b)
		}
		time.Sleep(time.Millisecond)
	}
}

// A plugin named without a directory ("my-plugin", which is what
// filepath.Join(".", "my-plugin") gives for `tracepipe plugins --dir .`)
// is the file in the current directory, not a command looked up in $PATH.
func TestBareNameIsTheFileHere(t *testing.T) {
	path := counterPlugin(t)
	t.Chdir(filepath.Dir(path))
	t.Setenv("PATH", t.TempDir()) // nothing to find there
	ds, err := Describe(context.Background(), filepath.Base(path), nil)
	if err != nil {
		t.Fatalf("Describe(%q) in its directory: %v", filepath.Base(path), err)
	}
	if len(ds) != 1 || ds[0].Name != "example.counter" {
		t.Fatalf("Describe: %+v", ds)
	}
}
