//go:build linux

package host

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// A process started as shimArg0 is the rlimit shim of a plugin launch
// (contain_linux.go): it sets the limits on itself and becomes the plugin.
// This runs in every binary that links this package (tracepipe, tests),
// before main; the environment and the name both come from the host that
// started it.
func init() {
	if len(os.Args) == 1 && os.Args[0] == shimArg0 && os.Getenv(envShimExec) != "" {
		runShim()
	}
}

// runShim never returns: it execs the plugin or exits with status 127.
func runShim() {
	path := os.Getenv(envShimExec)
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "tracepipe: plugin %s: "+format+"\n", append([]any{path}, args...)...)
		os.Exit(127)
	}
	for _, kv := range strings.Split(os.Getenv(envShimLimits), ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			fail("bad limit %q", kv)
		}
		var res int
		lim := unix.Rlimit{Cur: n, Max: n}
		switch k {
		case "data":
			res = unix.RLIMIT_DATA
		case "cpu":
			// SIGXCPU at the soft limit (ignored by Go programs), SIGKILL
			// one second later.
			res, lim.Max = unix.RLIMIT_CPU, n+1
		default:
			fail("unknown limit %q", kv)
		}
		if err := unix.Setrlimit(res, &lim); err != nil {
			fail("setting limit %s: %v", kv, err)
		}
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envShimExec+"=") && !strings.HasPrefix(kv, envShimLimits+"=") {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(path, []string{path}, env)
	fail("exec: %v", err)
}
