package testsupport

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Fatalf and Skip instead of ending
// the goroutine, so the decision GoldenDir makes can be checked.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Fatalf(f string, args ...any) { r.fatal = fmt.Sprintf(f, args...) }
func (r *recorder) Skip(args ...any)             { r.skip = fmt.Sprint(args...) }

func TestMissingFolderFailsInCI(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "shared")
	r := &recorder{TB: t}
	if got := dir(r, shared, true, "protovm"); got != "" {
		t.Fatalf("dir = %q for a missing folder", got)
	}
	want := filepath.Join(shared, "golden", "protovm")
	if r.skip != "" || !strings.Contains(r.fatal, want) {
		t.Fatalf("CI: fatal %q, skip %q; want a failure naming %s", r.fatal, r.skip, want)
	}
}

func TestMissingFolderSkipsLocally(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "shared")
	r := &recorder{TB: t}
	dir(r, shared, false, "tracebuffer-v2")
	want := filepath.Join(shared, "golden", "tracebuffer-v2")
	if r.fatal != "" || !strings.Contains(r.skip, want) {
		t.Fatalf("local: fatal %q, skip %q; want a skip naming %s", r.fatal, r.skip, want)
	}
}

func TestPresentFolder(t *testing.T) {
	shared := t.TempDir()
	want := filepath.Join(shared, "golden", "perfetto-smb")
	if err := os.MkdirAll(want, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	if got := dir(r, shared, true, "perfetto-smb"); got != want || r.fatal != "" || r.skip != "" {
		t.Fatalf("dir = %q (fatal %q, skip %q), want %q", got, r.fatal, r.skip, want)
	}
}

// TestGoldenDirFindsShared checks the real lookup from this package folder: the
// module root's sibling shared/golden.
func TestGoldenDirFindsShared(t *testing.T) {
	d := GoldenDir(t)
	if filepath.Base(d) != "golden" || filepath.Base(filepath.Dir(d)) != "shared" {
		t.Fatalf("GoldenDir() = %q, want .../shared/golden", d)
	}
}
