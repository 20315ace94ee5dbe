package testsupport

import (
	"os"
	"testing"
)

// BenchDir returns a directory for a benchmark's output: tmpfs (/dev/shm)
// when present and disk is false, so that the figure measures the code
// rather than this machine's disk, else the benchmark's temporary
// directory. Either is removed when the benchmark ends.
func BenchDir(b *testing.B, disk bool) string {
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
