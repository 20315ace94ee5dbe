//go:build linux

package host

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/smb"
)

var (
	faultOnce sync.Once
	faultPath string
	faultErr  error
)

// faultPlugin builds plugins/internal/faultplugin once per test binary.
func faultPlugin(t *testing.T) string {
	t.Helper()
	faultOnce.Do(func() {
		goCmd, err := goTool()
		if err != nil {
			faultErr = err
			return
		}
		dir, err := os.MkdirTemp("", "tracepipe-faultplugin")
		if err != nil {
			faultErr = err
			return
		}
		faultPath = filepath.Join(dir, "faultplugin")
		// Never with -race: the race detector's shadow memory counts
		// against RLIMIT_DATA, and a race-built plugin cannot start under
		// a memory limit.
		cmd := exec.Command(goCmd, "build", "-o", faultPath, "../internal/faultplugin")
		if out, err := cmd.CombinedOutput(); err != nil {
			faultErr = fmt.Errorf("go build ./plugins/internal/faultplugin: %v\n%s", err, out)
		}
	})
	if faultErr != nil {
		t.Fatal(faultErr)
	}
	return faultPath
}

// launchFault launches the fault plugin in mode with extra config.
func launchFault(t *testing.T, mode string, config map[string]any, limits Limits, stderr *bytes.Buffer) *Plugin {
	t.Helper()
	shm := newSMB(t, 64<<10, 4096)
	t.Cleanup(func() { shm.Close() })
	cfg := map[string]any{"mode": mode, "packets": 10}
	for k, v := range config {
		cfg[k] = v
	}
	var w *lockedBuffer
	if stderr != nil {
		w = &lockedBuffer{b: stderr}
	}
	c := Config{
		Path:             faultPlugin(t),
		Name:             "fault.source",
		DataSourceConfig: cfg,
		SMB:              shm,
		Policy:           smb.Stall,
		OnCommit:         func([]byte) {},
		Limits:           limits,
	}
	if w != nil {
		c.Stderr = w
	}
	p, err := Launch(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// spawned reads the pids the fault plugin's spawn mode wrote.
func spawned(t *testing.T, pidfile string) []int {
	t.Helper()
	var b []byte
	var pids []int
	written := func() bool {
		b, _ = os.ReadFile(pidfile)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return len(pids) == 2 && bytes.HasSuffix(b, []byte("\n"))
	}
	if !testsupport.WaitFor(30*time.Second, written) {
		t.Fatalf("the plugin did not write two pids to %s within 30s (%q)", pidfile, b)
	}
	return pids
}

// sleeping reports whether pid is a live (not zombie) `sleep tag`.
func sleeping(pid int, tag string) bool {
	pi, ok := readStat(pid)
	if !ok || pi.zombie {
		return false
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return string(cmdline) == "sleep\x00"+tag+"\x00"
}

// A plugin's setsid'd child and its double-forked orphan end with it,
// whether the plugin is stopped, killed, or dies on its own, and by
// either mechanism: the cgroup (where this machine has one) and the sweep.
func TestTreeEndsWithPlugin(t *testing.T) {
	mechanisms := []string{"sweep"}
	if base, _ := cgroupBase(); base != "" {
		mechanisms = append(mechanisms, "cgroup")
	} else {
		t.Log("no writable cgroup2 hierarchy here: only the sweep is tested")
	}
	for _, mech := range mechanisms {
		for _, end := range []string{"Stop", "Kill", "SIGKILL"} {
			t.Run(mech+"/"+end, func(t *testing.T) {
				forceSweep.Store(mech == "sweep")
				defer forceSweep.Store(false)
				tag := fmt.Sprintf("%d.%d", 1000+os.Getpid()%1000, time.Now().UnixNano()%1_000_000)
				pidfile := filepath.Join(t.TempDir(), "pids")
				p := launchFault(t, "spawn", map[string]any{"pidfile": pidfile, "tag": tag}, Limits{}, nil)
				if got := p.tree.mechanism(); !strings.HasPrefix(got, mech) {
					t.Fatalf("contained by %s, want %s", got, mech)
				}
				pids := spawned(t, pidfile)
				for _, pid := range pids {
					if !sleeping(pid, tag) {
						t.Fatalf("spawned pid %d is not a running `sleep %s`", pid, tag)
					}
				}
				switch end {
				case "Stop":
					if err := p.Stop(); err != nil {
						t.Fatal(err)
					}
				case "Kill":
					p.Kill()
				case "SIGKILL":
					// The plugin dies on its own; its children live on
					// until the host ends the tree.
					if err := syscallKill(p.Pid()); err != nil {
						t.Fatal(err)
					}
					waitClosed(t, p.Done(), 10*time.Second, "commit stream end")
					p.End()
				}
				for _, pid := range pids {
					if sleeping(pid, tag) {
						t.Errorf("pid %d (`sleep %s`) outlived the plugin (contained by %s)", pid, tag, p.tree.mechanism())
						_ = syscallKill(pid)
					}
				}
				if mech == "cgroup" {
					if _, err := os.Stat(p.tree.cg); !os.IsNotExist(err) {
						t.Errorf("cgroup %s left behind: %v", p.tree.cg, err)
					}
				}
			})
		}
	}
}

// A plugin that allocates without bound under a memory limit dies, and
// LimitExceeded names the limit.
func TestMemoryLimitExceeded(t *testing.T) {
	var stderr bytes.Buffer
	p := launchFault(t, "alloc", nil, Limits{Memory: 256 << 20}, &stderr)
	if err := p.Flush(1); err != nil { // the fault plugin allocates from its first flush on
		t.Fatal(err)
	}
	waitClosed(t, p.Done(), 60*time.Second, "the plugin's death")
	st, ok := p.WaitExit(30 * time.Second)
	if !ok {
		t.Fatal("the plugin's commit stream ended but it did not exit")
	}
	if got, want := p.LimitExceeded(), "memory limit 256 MiB exceeded"; got != want {
		t.Errorf("LimitExceeded() = %q, want %q (exit: %s; stderr: %.500s)", got, want, st, stderr.String())
	}
	if strings.Contains(stderr.String(), "nothing stopped it") {
		t.Error("the plugin allocated 1 GiB under a 64 MiB limit")
	}
	t.Logf("exit: %s", st)
}

// Without a limit, a plugin that exits after an allocation failure of its
// own is not reported as breaking one; with a limit, a plain crash is not
// either.
func TestLimitExceededOnlyForItsCause(t *testing.T) {
	p := launchFault(t, "panic", nil, Limits{Memory: 256 << 20, CPU: time.Hour}, nil)
	waitClosed(t, p.Done(), 60*time.Second, "the plugin's death")
	if _, ok := p.WaitExit(30 * time.Second); !ok {
		t.Fatal("the plugin did not exit")
	}
	if got := p.LimitExceeded(); got != "" {
		t.Errorf("a panic under limits reported as %q", got)
	}
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// removeTestBuilds removes what faultPlugin built (TestMain calls it).
func removeTestBuilds() {
	if faultPath != "" {
		os.RemoveAll(filepath.Dir(faultPath))
	}
}

// FuzzParseStat: whatever name a process gives itself (comm, up to 15
// bytes of anything), its stat line parses to its parent and group.
func FuzzParseStat(f *testing.F) {
	f.Add("sleep", 1, 2)
	f.Add("a) S 7 7 (", 99, 5)
	f.Add(") Z 1 1", 0, 0)
	f.Add("\n)\n", 3, 3)
	f.Fuzz(func(t *testing.T, comm string, ppid, pgrp int) {
		if len(comm) > 15 || ppid < 0 || pgrp < 0 {
			return // the kernel's bounds
		}
		line := fmt.Sprintf("123 (%s) S %d %d 0 0 -1 4194560 100 0 0 0\n", comm, ppid, pgrp)
		pi, ok := parseStat([]byte(line))
		if !ok || pi.ppid != ppid || pi.pgrp != pgrp || pi.zombie {
			t.Fatalf("parseStat(%q) = %+v, %v", line, pi, ok)
		}
		_, _ = parseStat([]byte(comm)) // garbage: no panic
	})
}

// A plugin that burns CPU under a CPU limit is killed once it used it
// (RLIMIT_CPU: SIGKILL a second after the soft limit), and LimitExceeded
// names the limit.
func TestCPULimitExceeded(t *testing.T) {
	p := launchFault(t, "spin", nil, Limits{CPU: time.Second}, nil)
	waitClosed(t, p.Done(), 60*time.Second, "the plugin's death")
	st, ok := p.WaitExit(30 * time.Second)
	if !ok {
		t.Fatal("the plugin's commit stream ended but it did not exit")
	}
	if got, want := p.LimitExceeded(), "cpu limit 1s exceeded"; got != want {
		t.Errorf("LimitExceeded() = %q, want %q (exit: %s)", got, want, st)
	}
	t.Logf("exit: %s", st)
}

// A plugin cgroup left by a tracepipe that is gone (killed with SIGKILL)
// is ended and removed by the next one; one of a live tracepipe is not.
func TestStaleCgroupsRemoved(t *testing.T) {
	base, _ := cgroupBase()
	if base == "" {
		t.Skip("no writable cgroup2 hierarchy on this machine (the sweep has no leftovers to clean)")
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(base, fmt.Sprintf("tracepipe-plugin-%d.1", gone.Process.Pid))
	live := filepath.Join(base, fmt.Sprintf("tracepipe-plugin-%d.999999", os.Getpid()))
	for _, dir := range []string{stale, live} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer os.Remove(live)
	tag := fmt.Sprintf("1003.%d", time.Now().UnixNano()%1_000_000)
	sleeper := exec.Command("sleep", tag)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Wait()
	defer sleeper.Process.Kill()
	if err := os.WriteFile(filepath.Join(stale, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	removeStaleCgroups(base)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale cgroup %s still there (%v)", stale, err)
	}
	if st, err := sleeper.Process.Wait(); err != nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the process in the stale cgroup ended with %v, %v; want SIGKILL", st, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the cgroup of a live tracepipe was removed: %v", err)
	}
}

// A descendant that keeps the plugin's stderr open does not hold up the
// plugin's end: once the plugin exited, its tree is killed, which ends
// the stream go-plugin waits for. (The graceful exit timeout, which would
// also end it, is made longer than the test's deadline.)
func TestEndNotHeldByDescendantStderr(t *testing.T) {
	old := gracefulExitTimeout
	gracefulExitTimeout = 10 * time.Minute
	defer func() { gracefulExitTimeout = old }()
	tag := fmt.Sprintf("1004.%d", time.Now().UnixNano()%1_000_000)
	pidfile := filepath.Join(t.TempDir(), "pids")
	var stderr bytes.Buffer
	p := launchFault(t, "spawn", map[string]any{"pidfile": pidfile, "tag": tag, "inherit_stderr": true}, Limits{}, &stderr)
	pids := spawned(t, pidfile)
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- p.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Stop took %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		t.Fatalf("Stop did not return within 60s while pid %d held the plugin's stderr", pids[0])
	}
	for _, pid := range pids {
		if sleeping(pid, tag) {
			t.Errorf("pid %d outlived the plugin", pid)
			_ = syscallKill(pid)
		}
	}
}

// What a plugin writes while it is only asked to describe itself or check
// a config passes up to maxInspectStderr bytes; the rest is counted and
// reported.
func TestCappedWriter(t *testing.T) {
	var out bytes.Buffer
	c := &cappedWriter{w: &out, left: 10, limit: 10}
	for _, s := range []string{"12345", "6789abc", "def"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	c.report("/p")
	want := "123456789a\ntracepipe: plugin /p: 5 more bytes of stderr suppressed (over 10)\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}
