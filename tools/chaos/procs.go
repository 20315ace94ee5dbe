package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child process the soak started (nats-server, tracepipe serve,
// the session): started again after a fault with the same arguments.
type proc struct {
	name string
	path string
	args []string
	env  []string
	log  *os.File
	cmd  *exec.Cmd
	exit chan error
}

func newProc(name, logPath, path string, env []string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &proc{name: name, path: path, args: args, env: env, log: f}, nil
}

func (p *proc) start() error {
	c := exec.Command(p.path, p.args...)
	c.Stdout, c.Stderr = p.log, p.log
	c.Env = append(os.Environ(), p.env...)
	if err := c.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	fmt.Fprintf(p.log, "=== chaos: started pid %d at %s\n", c.Process.Pid, time.Now().UTC().Format(time.RFC3339Nano))
	p.cmd, p.exit = c, make(chan error, 1)
	go func() { p.exit <- c.Wait() }()
	return nil
}

func (p *proc) pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// stop sends sig and waits up to wait for the process to end, then kills it.
func (p *proc) stop(sig syscall.Signal, wait time.Duration) error {
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.exit:
		p.cmd = nil
		return err
	case <-time.After(wait):
		_ = p.cmd.Process.Kill()
		err := <-p.exit
		p.cmd = nil
		return fmt.Errorf("%s did not end within %v of %v: killed (%v)", p.name, wait, sig, err)
	}
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitTCP waits until addr accepts a connection.
func waitTCP(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not accepting after %v: %w", addr, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// goBuild builds a main package of this module into dir.
func goBuild(dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	c := exec.Command(goCmd, "build", "-o", out, pkg)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w", pkg, err)
	}
	return out, nil
}

// procStatus reads VmRSS (bytes) and Threads of a process.
func procStatus(pid int) (rss int64, threads int) {
	if pid == 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				rss = kb << 10
			}
		}
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			threads, _ = strconv.Atoi(strings.TrimSpace(rest))
		}
	}
	return rss, threads
}

func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// childrenNamed returns the pids of the direct children of pid whose
// command name (comm) is name: the plugin processes of the session.
func childrenNamed(pid int, name string) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	seen := map[int]bool{}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			c, err := strconv.Atoi(f)
			if err != nil || seen[c] {
				continue
			}
			seen[c] = true
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c))
			if err == nil && strings.TrimSpace(string(comm)) == name {
				out = append(out, c)
			}
		}
	}
	return out
}
