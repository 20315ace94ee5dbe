package testsupport

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	t.Setenv(SkipLogEnv, "") // this skip is the test's, not one for make's summary
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

// A local skip is noted in the skip log (for make test's summary line); a
// CI failure is not a skip and is not noted.
func TestSkipIsLogged(t *testing.T) {
	log := filepath.Join(t.TempDir(), "skips")
	t.Setenv(SkipLogEnv, log)
	shared := filepath.Join(t.TempDir(), "shared")
	dir(&recorder{TB: t}, shared, false, "protovm")
	dir(&recorder{TB: t}, shared, true, "perfetto-smb")
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := "internal/testsupport\t" + t.Name() + "\t" + filepath.Join(shared, "golden", "protovm") + "\n"
	if string(b) != want {
		t.Fatalf("skip log %q, want %q", b, want)
	}
}

// TestMakefileSummarisesSkips runs the Makefile's unit target with a
// stand-in for go that logs two skips, as GoldenDir does, and fails: make
// ends with one line naming the packages and the missing folder, and
// keeps go's exit status.
func TestMakefileSummarisesSkips(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make (the README's test command) is not installed: %v", err)
	}
	fake := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\nprintf 'protovm\\tTestA\\t/x/shared/golden/protovm\\nsmb\\tTestB/sub\\t/x/shared/golden/perfetto-smb/v1\\n' >> \"$" + SkipLogEnv + "\"\nexit 3\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(makeBin, "-s", "-C", root, "unit", "GO="+fake)
	// The outer make's skip log (when make test runs this) is not the
	// stand-in's to write to.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", SkipLogEnv+"=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("make unit: %v (want the fake go's failure)\n%s", err, out)
	}
	// make's own "*** Error 3" line follows; the summary is the last of ours.
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(l, "make: ") && !strings.HasPrefix(l, "make[") {
			lines = append(lines, l)
		}
	}
	want := "SKIPPED: 2 golden conformance tests in protovm smb: /x/shared/golden is missing (CI is unset, so they skip; with CI set they fail)"
	if len(lines) == 0 || lines[len(lines)-1] != want {
		t.Fatalf("last line of make unit's output is not %q:\n%s", want, out)
	}
}
