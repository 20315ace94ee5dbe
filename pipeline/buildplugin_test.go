package pipeline

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// builtPlugin is one plugin program built for this test binary.
type builtPlugin struct {
	once sync.Once
	path string
	err  error
}

var (
	builtMu      sync.Mutex
	builtPlugins = map[string]*builtPlugin{}
)

// buildPlugin builds the main package pkg (relative to the module root)
// once per test binary and returns the executable's path.
func buildPlugin(tb testing.TB, pkg string) string {
	tb.Helper()
	builtMu.Lock()
	bp := builtPlugins[pkg]
	if bp == nil {
		bp = &builtPlugin{}
		builtPlugins[pkg] = bp
	}
	builtMu.Unlock()
	bp.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		dir, err := os.MkdirTemp("", "tracepipe-"+filepath.Base(pkg)+"-")
		if err != nil {
			bp.err = err
			return
		}
		bp.path = filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command(goBin, "build", "-o", bp.path, "./"+pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			bp.err = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
		}
	})
	if bp.err != nil {
		tb.Fatal(bp.err)
	}
	return bp.path
}
