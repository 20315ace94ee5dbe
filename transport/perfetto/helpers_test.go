package perfetto

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/config"
)

// The small helpers this package's tests share with package pipeline's
// tests (which cannot export them: they are in its test files).

// benchDir is where a benchmark's trace goes: tmpfs when there is one and
// the disk is not what is measured.
func benchDir(b *testing.B, disk bool) string {
	if !disk {
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			dir, err := os.MkdirTemp("/dev/shm", "tracepipe-bench-")
			if err == nil {
				b.Cleanup(func() { os.RemoveAll(dir) })
				return dir
			}
		}
	}
	return b.TempDir()
}

// loadYAML loads a session config from YAML text with pipeline.Load.
func loadYAML(t testing.TB, text string, sets ...string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "session.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.LoadOptions{Path: path, Sets: sets})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}
