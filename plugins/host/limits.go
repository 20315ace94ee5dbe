package host

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits bound the resources of one plugin's process tree; a zero field
// sets no limit. On Linux, Memory is the cgroup v2 memory.max of the
// plugin's cgroup when the memory controller is delegated to tracepipe's
// cgroup, else RLIMIT_DATA of the plugin (inherited by what it starts);
// CPU is RLIMIT_CPU (total CPU seconds, rounded up; the process is killed
// one second after the soft limit). Elsewhere, setting a limit fails the
// launch.
type Limits struct {
	Memory int64         // bytes the plugin may allocate
	CPU    time.Duration // CPU time the plugin may use in total
}

func (l Limits) set() bool { return l.Memory > 0 || l.CPU > 0 }

// cpuSeconds is the CPU limit in whole seconds, rounded up.
func (l Limits) cpuSeconds() uint64 {
	return uint64((l.CPU + time.Second - 1) / time.Second)
}

// MemoryExceeded is the failure of a plugin that broke its memory limit.
func (l Limits) memoryExceeded() string {
	return fmt.Sprintf("memory limit %s exceeded", sizeString(l.Memory))
}

func (l Limits) cpuExceeded() string {
	return fmt.Sprintf("cpu limit %v exceeded", time.Duration(l.cpuSeconds())*time.Second)
}

// sizeString renders a byte count in the largest binary unit that divides
// it ("256 MiB"), else in bytes.
func sizeString(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for i < len(units)-1 && n >= 1024 && n%1024 == 0 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%d %s", n, units[i])
}

// oomWatch notices a child reporting that an allocation failed, as
// language runtimes do when a memory rlimit stops them (Go: "fatal error:
// runtime: out of memory" or "cannot allocate memory").
type oomWatch struct{ hit atomic.Bool }

var oomSigns = [][]byte{
	[]byte("out of memory"),
	[]byte("cannot allocate memory"),
	[]byte("bad_alloc"),
	[]byte("MemoryError"),
	[]byte("memory allocation of"),
}

func (o *oomWatch) see(b []byte) {
	if o == nil || o.hit.Load() {
		return
	}
	for _, s := range oomSigns {
		if bytes.Contains(b, s) {
			o.hit.Store(true)
			return
		}
	}
}

func (o *oomWatch) seen() bool { return o != nil && o.hit.Load() }

// LimitExceeded says which of its limits the child broke, once it ended:
// "memory limit 256 MiB exceeded" when its cgroup's OOM killer acted or
// it reported a failed allocation under a memory limit; "cpu limit 2s
// exceeded" when it was killed (SIGXCPU or SIGKILL) after using its CPU
// time. "" when none (or while it runs).
func (p *Plugin) LimitExceeded() string {
	if p.limits.Memory > 0 && (p.tree.memoryLimitHit() || p.oom.seen()) {
		return p.limits.memoryExceeded()
	}
	if p.limits.CPU > 0 && p.cli.Exited() {
		st := p.cmd.ProcessState
		if st == nil {
			return ""
		}
		ws, ok := st.Sys().(syscall.WaitStatus)
		used := st.UserTime() + st.SystemTime()
		if ok && ws.Signaled() && (ws.Signal() == syscall.SIGXCPU || ws.Signal() == syscall.SIGKILL) &&
			used >= time.Duration(p.limits.cpuSeconds())*time.Second-100*time.Millisecond {
			return p.limits.cpuExceeded()
		}
	}
	return ""
}
