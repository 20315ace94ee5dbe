//go:build linux

package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Containment on Linux. Every plugin child runs in a process tree that
// ends with it:
//
//  1. cgroup v2, when tracepipe may create a cgroup below its own in the
//     cgroup2 hierarchy and the kernel has cgroup.kill (5.14+): the child
//     is cloned straight into a fresh cgroup (CLONE_INTO_CGROUP, so it
//     cannot fork before it is inside), and at its end cgroup.kill ends
//     everything in it, setsid'd and double-forked descendants included,
//     since nothing leaves a cgroup by forking. The memory limit is the
//     cgroup's memory.max when the memory controller is delegated to
//     tracepipe's cgroup (tracepipe never enables controllers itself).
//  2. Otherwise a sweep: the child gets a marker in its environment
//     (inherited by what it starts) and its own process group; at its end
//     every process that carries the marker, is in the group, or descends
//     from the child (while the child is provably not reaped) is killed,
//     scan after scan until none is left. A descendant that both scrubs
//     its environment and escapes the tree (setsid plus a double fork
//     with a clean environment) is beyond it: only the cgroup sees it.
//     tracepipe does not become a child subreaper: it would have to reap
//     every adopted orphan without stealing os/exec's children (a
//     wait4(-1) reaper would), and what it adopts it could attribute to a
//     plugin only by the same marker.
//
// Limits without a cgroup controller are rlimits set by a re-exec shim:
// the child is first tracepipe itself (/proc/self/exe) under the name
// shimArg0; this package's init sees the name, sets the rlimits on its own
// process and execs the plugin, which inherits them. Setting them there,
// before the plugin's first instruction, leaves no window in which the
// plugin runs unlimited (prlimit(2) after the start would).

// Environment of the child.
const (
	// envMarker carries the tree's marker ("<host pid>.<launch>").
	envMarker = "TRACEPIPE_PLUGIN_TREE"
	// envShimExec and envShimLimits tell the shim what to exec and which
	// rlimits to set ("data=<bytes>,cpu=<seconds>"); the shim removes
	// them before the exec.
	envShimExec   = "TRACEPIPE_PLUGIN_SHIM_EXEC"
	envShimLimits = "TRACEPIPE_PLUGIN_SHIM_LIMITS"
	shimArg0      = "tracepipe-plugin-shim"
)

// Bounds of the end of a tree (variables for tests).
var (
	// treeEndTimeout bounds the wait for a killed tree to be gone.
	treeEndTimeout = 3 * time.Second
	// forceSweep makes every tree use the sweep (tests of the fallback).
	forceSweep atomic.Bool
)

var launches atomic.Uint64

// cgroupBase is the directory plugin cgroups are created in (tracepipe's
// own cgroup in the cgroup2 hierarchy), found once; "" when there is none.
var cgroupBase = sync.OnceValues(findCgroupBase)

// cgroupBroken is set when a clone into a cgroup failed (a seccomp
// profile refusing clone3, say): later launches use the sweep.
var cgroupBroken atomic.Bool

// findCgroupBase finds the cgroup2 mount and tracepipe's cgroup in it and
// says whether the memory controller is enabled for its children.
func findCgroupBase() (string, bool) {
	mount := ""
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// "id parent maj:min root mountpoint opts ... - fstype source opts"
			left, right, ok := strings.Cut(sc.Text(), " - ")
			if !ok || !strings.HasPrefix(right, "cgroup2 ") {
				continue
			}
			if fields := strings.Fields(left); len(fields) >= 5 && fields[3] == "/" {
				mount = fields[4]
				break
			}
		}
		f.Close()
	}
	if mount == "" {
		return "", false
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	rel := ""
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = p, true
			break
		}
	}
	if !found || strings.Contains(rel, "..") {
		return "", false
	}
	base := filepath.Join(mount, rel)
	ctl, _ := os.ReadFile(filepath.Join(base, "cgroup.subtree_control"))
	removeStaleCgroups(base)
	return base, hasWord(string(ctl), "memory")
}

// removeStaleCgroups ends and removes the plugin cgroups a tracepipe that
// is gone left in base (one killed with SIGKILL cannot clean up: its
// plugins die with it, by their parent-death signal, but not what they
// started). A cgroup whose tracepipe pid is alive is left alone, even if
// the pid now names another process.
func removeStaleCgroups(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "tracepipe-plugin-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, ".")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		dir := filepath.Join(base, e.Name())
		t := &tree{cg: dir, pidfd: -1}
		t.endCgroup(time.Now().Add(treeEndTimeout))
	}
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// tree is the process tree of one plugin child.
type tree struct {
	limits Limits
	marker string

	cg     string   // the child's cgroup directory; "" with the sweep
	cgFile *os.File // open on cg until the child started
	cgMem  bool     // the memory limit is cg's memory.max

	pidfd int // the child (before it is reaped), -1 when unknown
	pid   int
	pgid  bool // the child leads its own process group

	endOnce  sync.Once
	oomKills atomic.Uint64 // memory.events oom_kill of cg at its end
}

// newTree prepares the containment of a plugin child that cmd will start
// (path being the plugin executable): its cgroup or sweep marker and,
// when limits need them, the rlimit shim.
func newTree(cmd *exec.Cmd, path string, limits Limits) (*tree, error) {
	t := &tree{limits: limits, pidfd: -1}
	t.marker = fmt.Sprintf("%d.%d", os.Getpid(), launches.Add(1))
	cmd.Env = append(cmd.Env, envMarker+"="+t.marker)
	if cmd.SysProcAttr != nil {
		t.pgid = cmd.SysProcAttr.Setpgid
	}
	if base, mem := cgroupBase(); base != "" && !forceSweep.Load() && !cgroupBroken.Load() {
		t.openCgroup(base, mem, cmd)
	}
	var rl []string
	if limits.Memory > 0 && !t.cgMem {
		rl = append(rl, fmt.Sprintf("data=%d", limits.Memory))
	}
	if limits.CPU > 0 {
		rl = append(rl, fmt.Sprintf("cpu=%d", limits.cpuSeconds()))
	}
	if len(rl) > 0 {
		// The plugin must be there and executable now: the shim can only
		// say so on its stderr.
		if _, err := exec.LookPath(cmd.Path); err != nil {
			t.end()
			return nil, err
		}
		cmd.Env = append(cmd.Env, envShimExec+"="+cmd.Path, envShimLimits+"="+strings.Join(rl, ","))
		cmd.Path = "/proc/self/exe"
		cmd.Args = []string{shimArg0}
		cmd.Err = nil
	}
	return t, nil
}

// openCgroup creates the child's cgroup and makes cmd clone into it; on
// any failure the tree uses the sweep.
func (t *tree) openCgroup(base string, mem bool, cmd *exec.Cmd) {
	dir := filepath.Join(base, "tracepipe-plugin-"+t.marker)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		_ = os.Remove(dir) // a kernel before 5.14
		return
	}
	if mem && t.limits.Memory > 0 {
		if os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(t.limits.Memory, 10)), 0) != nil {
			mem = false
		} else {
			// Not into swap either, where the kernel has it.
			_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return
	}
	t.cg, t.cgFile, t.cgMem = dir, f, mem && t.limits.Memory > 0
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(f.Fd())
}

// mechanism names how the tree is contained (for errors and tests).
func (t *tree) mechanism() string {
	if t.cg != "" {
		return "cgroup " + t.cg
	}
	return "sweep " + envMarker + "=" + t.marker
}

// started records the child once go-plugin started it: alive says it was
// not reaped yet when its pidfd was taken (else no pidfd is kept, as the
// pid may name another process by now). A failed start disables cgroups
// for later launches when this one used a cgroup.
func (t *tree) started(cmd *exec.Cmd, alive func() bool) {
	if t.cgFile != nil {
		_ = t.cgFile.Close()
		t.cgFile = nil
	}
	if cmd.Process == nil {
		if t.cg != "" {
			cgroupBroken.Store(true)
		}
		return
	}
	t.pid = cmd.Process.Pid
	if fd, err := unix.PidfdOpen(t.pid, 0); err == nil {
		if alive() {
			t.pidfd = fd
		} else {
			_ = unix.Close(fd)
		}
	}
}

// childExited reports whether the child exited, reaped or not (go-plugin
// reaps it only once its stdout and stderr ended, which a descendant
// holding them open delays).
func (t *tree) childExited() bool {
	if t.pidfd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(t.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// cgroupFailed reports whether cmd could not be started into the tree's
// cgroup (the caller may retry with the sweep).
func (t *tree) cgroupFailed(cmd *exec.Cmd) bool { return t.cg != "" && cmd.Process == nil }

// kill ends every process of the tree now, without waiting.
func (t *tree) kill() {
	if t.cg != "" {
		_ = os.WriteFile(filepath.Join(t.cg, "cgroup.kill"), []byte("1"), 0)
		return
	}
	t.sweep(time.Time{})
}

// end kills what is left of the tree and waits (up to treeEndTimeout)
// until it is gone; it removes the cgroup. Idempotent.
func (t *tree) end() {
	t.endOnce.Do(func() {
		deadline := time.Now().Add(treeEndTimeout)
		if t.cgFile != nil {
			_ = t.cgFile.Close()
			t.cgFile = nil
		}
		if t.cg != "" {
			t.endCgroup(deadline)
		} else {
			t.sweep(deadline)
		}
		if t.pidfd >= 0 {
			_ = unix.Close(t.pidfd)
			t.pidfd = -1
		}
	})
}

func (t *tree) endCgroup(deadline time.Time) {
	kill := filepath.Join(t.cg, "cgroup.kill")
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if !populated(t.cg) {
			break
		}
		_ = os.WriteFile(kill, []byte("1"), 0)
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(delay)
	}
	if t.cgMem {
		t.oomKills.Store(memoryEvent(t.cg, "oom_kill"))
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		err := os.Remove(t.cg)
		if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(delay)
	}
}

// populated reads cgroup.events: whether a live process is in dir.
func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("populated 1"))
}

func memoryEvent(dir, key string) uint64 {
	b, err := os.ReadFile(filepath.Join(dir, "memory.events"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// memoryLimitHit reports whether the cgroup's OOM killer acted on the
// tree (read live until the cgroup is removed).
func (t *tree) memoryLimitHit() bool {
	if t.cgMem && memoryEvent(t.cg, "oom_kill") > 0 {
		return true
	}
	return t.oomKills.Load() > 0
}

// sweep kills the processes of the tree, scan after scan, until a scan
// finds none alive or the deadline passed (a zero deadline: one round,
// no wait).
func (t *tree) sweep(deadline time.Time) {
	self := os.Getpid()
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		members := t.scan(self)
		for _, pid := range members {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if len(members) == 0 || deadline.IsZero() || time.Now().After(deadline) {
			return
		}
		time.Sleep(delay)
	}
}

// procInfo is what a scan reads of one process.
type procInfo struct {
	ppid, pgrp int
	zombie     bool
}

// scan lists the live (not zombie) processes of the tree, the caller's
// own process excepted.
func (t *tree) scan(self int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	procs := make(map[int]procInfo, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if pi, ok := readStat(pid); ok {
			procs[pid] = pi
		}
	}
	// The child's descendants count only while its pidfd says the child
	// is still the process this tree started (not reaped, so its pid is
	// not reused): checked after the scan, which it then describes.
	root := 0
	if t.pidfd >= 0 && unix.PidfdSendSignal(t.pidfd, 0, nil, 0) == nil {
		root = t.pid
	}
	want := []byte(envMarker + "=" + t.marker + "\x00")
	var out []int
	for pid, pi := range procs {
		if pi.zombie || pid == self || pid == 1 {
			continue
		}
		switch {
		case t.pgid && t.pid > 0 && pi.pgrp == t.pid:
			// The group id cannot be reused while the group has members.
		case root > 0 && descends(procs, pid, root):
		case hasMarker(pid, want):
		default:
			continue
		}
		out = append(out, pid)
	}
	return out
}

// descends reports whether root is pid or one of its ancestors.
func descends(procs map[int]procInfo, pid, root int) bool {
	for range 4096 { // a cycle cannot happen; the bound makes sure
		if pid == root {
			return true
		}
		pi, ok := procs[pid]
		if !ok || pi.ppid <= 1 {
			return false
		}
		pid = pi.ppid
	}
	return false
}

// readStat reads the parent, process group and state of pid.
func readStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	return parseStat(b)
}

// parseStat parses /proc/<pid>/stat: "pid (comm) state ppid pgrp ...",
// where comm (set by the process itself: untrusted) may hold spaces,
// parentheses and newlines.
func parseStat(b []byte) (procInfo, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return procInfo{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procInfo{}, false
	}
	return procInfo{ppid: ppid, pgrp: pgrp, zombie: f[0] == "Z" || f[0] == "X"}, true
}

// hasMarker reports whether pid's environment holds want
// ("NAME=value\x00").
func hasMarker(pid int, want []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	return bytes.HasPrefix(b, want) || bytes.Contains(b, append([]byte{0}, want...))
}
