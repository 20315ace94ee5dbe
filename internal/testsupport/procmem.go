package testsupport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BuildBinary builds the main package pkg (a path as `go build` takes it,
// relative to the test's package directory) into a temporary directory
// and returns the program's path, with env added to the go command's
// environment (CGO_ENABLED=0, as Makefile builds tracepiped). It is built
// without -race, whatever the test binary is: the race detector's shadow
// memory would dwarf what the memory tests measure.
func BuildBinary(tb testing.TB, pkg string, env ...string) string {
	tb.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		tb.Fatalf("building %s needs the go command: %v", pkg, err)
	}
	bin := filepath.Join(tb.TempDir(), filepath.Base(filepath.Clean(pkg)))
	if pkg == "." {
		wd, _ := os.Getwd()
		bin = filepath.Join(filepath.Dir(bin), filepath.Base(wd))
	}
	cmd := exec.Command(gobin, "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// VmHWM returns the peak resident set of process pid in bytes (0 once it
// is gone).
func VmHWM(pid int) int64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(st), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(l, "VmHWM: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}

// ResidentSplit reads the anonymous and total resident bytes of process
// pid from /proc/<pid>/smaps_rollup (ok false once it is gone).
func ResidentSplit(pid int) (anon, rss int64, ok bool) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, false
	}
	var haveAnon, haveRSS bool
	for _, l := range strings.Split(string(st), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(l, "Anonymous: %d kB", &kb); err == nil {
			anon, haveAnon = kb<<10, true
		} else if _, err := fmt.Sscanf(l, "Rss: %d kB", &kb); err == nil {
			rss, haveRSS = kb<<10, true
		}
	}
	return anon, rss, haveAnon && haveRSS
}

// CPUTime is the user + system CPU time process pid has used, from
// /proc/<pid>/stat (ok false once it is gone). Linux reports it in
// USER_HZ ticks, which are 1/100 s on every architecture Go supports.
func CPUTime(pid int) (time.Duration, bool) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(st)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 { // state is f[0]; utime and stime are fields 14, 15
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+k) * 10 * time.Millisecond, true
}
