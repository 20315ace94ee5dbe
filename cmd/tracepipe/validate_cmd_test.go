package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var configOK = regexp.MustCompile(`config OK: (\d+) buffers, (\d+) data sources, (\d+) sinks`)

// goodConfig writes a valid config with 2 buffers, 1 data source and 1
// sink into a temporary directory. The data source is an out-of-process
// plugin, so its name need not be registered; the plugin binary only has
// to exist and be executable.
func goodConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	plugin, err := os.ReadFile(examplePlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "counter-plugin"), plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "good.yaml")
	cfg := `duration: 2s
buffers:
  - name: main
    size_kb: 1024
  - size_kb: 256
    fill_policy: discard
data_sources:
  - name: example.counter
    plugin: counter-plugin
    target_buffer_name: main
sinks:
  - type: file
    path: ` + filepath.Join(dir, "out.pftrace") + `
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidateGood(t *testing.T) {
	path := goodConfig(t)
	stdout, stderr, code := runCLI(t, "validate", "-c", path)
	if code != exitOK || stderr != "" || strings.TrimSpace(stdout) != "config OK: 2 buffers, 1 data sources, 1 sinks" {
		t.Fatalf("good config: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	// --print: the effective config as YAML (defaults and --set applied),
	// the OK line as a YAML comment.
	stdout, stderr, code = runCLI(t, "validate", "-c", path, "--print", "--set", "duration=42s", "--set", "buffers[1].size_kb=512")
	if code != exitOK || stderr != "" {
		t.Fatalf("--print: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{`(?m)^duration: 42s$`, `(?m)^\s*size_kb: 512$`, `(?m)^\s*fill_policy: ring_buffer$`,
		`(?m)^# config OK: 2 buffers, 1 data sources, 1 sinks$`} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("--print output does not match %s:\n%s", want, stdout)
		}
	}
	// The printed config loads again, to the same counts.
	printed := filepath.Join(filepath.Dir(path), "printed.yaml")
	if err := os.WriteFile(printed, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := runCLI(t, "validate", "-c", printed); code != exitOK || !strings.Contains(stdout, "config OK: 2 buffers") {
		t.Errorf("printed config: exit %d, stderr %q", code, stderr)
	}
}

// The config may be the one positional argument, as with -c; both at once,
// or two files, are usage errors that say so.
func TestValidateConfigArgument(t *testing.T) {
	path := goodConfig(t)
	stdout, stderr, code := runCLI(t, "validate", path)
	if code != exitOK || strings.TrimSpace(stdout) != "config OK: 2 buffers, 1 data sources, 1 sinks" {
		t.Fatalf("validate FILE: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	if _, stderr, code := runCLI(t, "validate", "-c", path, path); code != exitUsage || !strings.Contains(stderr, "the config is given twice") {
		t.Errorf("-c and an argument: exit %d, stderr %q", code, stderr)
	}
	if _, stderr, code := runCLI(t, "validate", path, path); code != exitUsage || !strings.Contains(stderr, "accepts at most 1 arg") {
		t.Errorf("two arguments: exit %d, stderr %q", code, stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("duration: 1s\nbuffers: [{size_kb: 3}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runCLI(t, "run", bad); code == exitOK || !strings.Contains(stderr, "buffers[0].size_kb") {
		t.Errorf("run BAD: exit %d, stderr %q (want the bad key named)", code, stderr)
	}
}

func TestValidateEmbeddedDefault(t *testing.T) {
	stdout, stderr, code := runCLI(t, "validate")
	m := configOK.FindStringSubmatch(stdout)
	if code != exitOK || m == nil || m[1] == "0" || m[2] == "0" || m[3] == "0" {
		t.Fatalf("embedded default: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
}

func TestValidateBad(t *testing.T) {
	missing := "/nonexistent/tracepipe.yaml"
	_, stderr, code := runCLI(t, "validate", "-c", missing)
	if code != exitError || !strings.Contains(stderr, missing) {
		t.Errorf("missing file: exit %d, stderr %q", code, stderr)
	}
	// Not YAML at all.
	path := writeFile(t, "broken.yaml", []byte("buffers: [\n  {size_kb: \n"))
	stdout, stderr, code := runCLI(t, "validate", "-c", path)
	if code != exitError || !strings.HasPrefix(stderr, "tracepipe: ") || stdout != "" {
		t.Errorf("broken YAML: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	// Three problems in one file: each is reported, on its own line.
	path = writeFile(t, "bad.yaml", []byte("duration: 2s\nbuffers:\n  - size_kb: 0\ndata_sources: []\nsinks: []\n"))
	_, stderr, code = runCLI(t, "validate", "-c", path)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != exitError || len(lines) < 4 || !strings.Contains(lines[0], path) {
		t.Fatalf("invalid config: exit %d, stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"buffers[0].size_kb", "data_sources", "sinks"} {
		found := false
		for _, l := range lines[1:] {
			found = found || strings.HasPrefix(l, want)
		}
		if !found {
			t.Errorf("no line for %s in:\n%s", want, stderr)
		}
	}
	// A bad --set on a good config.
	_, stderr, code = runCLI(t, "validate", "-c", goodConfig(t), "--set", "duration=forever")
	if code != exitError || !strings.Contains(stderr, "duration") {
		t.Errorf("--set duration=forever: exit %d, stderr %q", code, stderr)
	}
}

// validate asks a plugin to check its config section and reports what it
// rejects under data_sources[i].config.
func TestValidateAsksThePlugin(t *testing.T) {
	path := goodConfig(t)
	_, stderr, code := runCLI(t, "validate", "-c", path, "--set", "data_sources[0].config.packets=-1", "--set", "data_sources[0].config.pakets=1")
	if code == exitOK || !strings.Contains(stderr, "data_sources[0].config.packets: must be >= 0, got -1") ||
		!strings.Contains(stderr, "data_sources[0].config.pakets: unknown key") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestValidateIgnoresUnrelatedEnv: `TRACEPIPE_FOO=1 tracepipe validate`
// succeeds and warns, naming the variable.
func TestValidateIgnoresUnrelatedEnv(t *testing.T) {
	t.Setenv("TRACEPIPE_FOO", "1")
	stdout, stderr, code := runCLI(t, "validate")
	if code != exitOK || !strings.Contains(stdout, "config OK") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "tracepipe: warning: TRACEPIPE_FOO is not a config variable") {
		t.Errorf("stderr does not warn about TRACEPIPE_FOO:\n%s", stderr)
	}
}
