// Package testsupport holds what tests of several packages share, so it is
// written once: where the golden conformance data is, and the TestMain of a
// package with leak checks and a generated seed corpus, and the small
// helpers many test files had a copy of (waits with a deadline, a locked
// log buffer, hand-built protobuf messages, a benchmark's output folder).
// Only tests import it. It imports no package of this module, so that any
// package's own tests (tracefile's, config's) may use it; helpers that need
// one live in its subpackages: cfgtest (a loaded config) and tracetest (a
// read trace).
//
// GoldenDir owns one decision: what a test does when ../shared is missing.
// In CI (the CI variable set, as .ci/run does) that is a failure naming the
// folder, so a suite cannot pass by not running; on a developer's machine
// the test is skipped with the same message. It does not read or interpret
// the data.
package testsupport

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// GoldenDir returns the folder shared/golden/<parts...> beside the module
// root, failing (CI) or skipping (local) t when it does not exist.
func GoldenDir(t testing.TB, parts ...string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("golden data: %v", err)
		return ""
	}
	return dir(t, filepath.Join(filepath.Dir(root), "shared"), os.Getenv("CI") != "", parts...)
}

// dir is GoldenDir with the shared folder and the CI decision given.
func dir(t testing.TB, shared string, ci bool, parts ...string) string {
	t.Helper()
	d := filepath.Join(append([]string{shared, "golden"}, parts...)...)
	if _, err := os.Stat(d); err != nil {
		msg := fmt.Sprintf("golden data folder %s is missing (the conformance suites need ../shared beside the clone): %v", d, err)
		if ci {
			t.Fatalf("%s; CI is set, so this is a failure, not a skip", msg)
		} else {
			noteSkip(os.Getenv(SkipLogEnv), t.Name(), d)
			t.Skip(msg)
		}
		return ""
	}
	return d
}

// moduleRoot walks up from the working directory (a package folder while
// tests run) to the folder holding go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
		d = up
	}
}

// SkipLogEnv names the environment variable holding the file GoldenDir
// appends a line to for each skipped test: package folder (relative to
// the module root), test name and missing folder, tab-separated. The
// Makefile's unit target sets it and summarises the file.
const SkipLogEnv = "TESTSUPPORT_SKIP_LOG"

// noteSkip appends the skip of test (missing folder missing) to the file
// log, when log is set. Lines are short single writes to a file opened
// for appending, so test binaries running in parallel do not interleave
// them. A log that cannot be written is left alone: the skip itself still
// shows in go test's output.
func noteSkip(log, test, missing string) {
	if log == "" {
		return
	}
	pkg := "."
	if root, err := moduleRoot(); err == nil {
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(root, wd); err == nil {
				pkg = rel
			}
		}
	}
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%s\t%s\n", pkg, test, missing)
}
