package testsupport

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteTempFile writes data to a new file called name in a directory of
// t's own (removed after the test) and returns its path.
func WriteTempFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
