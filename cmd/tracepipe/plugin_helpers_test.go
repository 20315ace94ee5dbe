package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	examplePluginOnce sync.Once
	examplePluginPath string
	examplePluginErr  error
)

// examplePlugin builds plugins/example/counterplugin once per test binary
// and returns its path.
func examplePlugin(t *testing.T) string {
	t.Helper()
	examplePluginOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		dir, err := os.MkdirTemp("", "tracepipe-cmd-plugin-")
		if err != nil {
			examplePluginErr = err
			return
		}
		examplePluginPath = filepath.Join(dir, "counterplugin")
		cmd := exec.Command(goBin, "build", "-o", examplePluginPath, "../../plugins/example/counterplugin")
		if out, err := cmd.CombinedOutput(); err != nil {
			examplePluginErr = fmt.Errorf("building the example plugin: %v\n%s", err, out)
		}
	})
	if examplePluginErr != nil {
		t.Fatal(examplePluginErr)
	}
	return examplePluginPath
}
