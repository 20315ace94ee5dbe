package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// `tracepipe plugins` lists what each plugin serves; with plugin_dir a
// data source is found by name alone, and validate asks that plugin.
func TestPluginsDiscovery(t *testing.T) {
	dir := t.TempDir()
	plugin, err := os.ReadFile(examplePlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tracepipe-plugin-counter"), plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "plugins", "--dir", dir)
	for _, want := range []string{filepath.Join(dir, "tracepipe-plugin-counter"), "  example.counter  writes a fixed number", "    config.packets (integer, default 100)  number of packets"} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Fatalf("exit %d, stderr %q, stdout lacks %q:\n%s", code, stderr, want, stdout)
		}
	}

	cfg := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`plugin_dir: %q
buffers: [{size_kb: 1024}]
data_sources: [{name: example.counter, config: {packets: -3}}, {name: no.such}]
sinks: [{type: file, path: out.pftrace}]
`, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runCLI(t, "validate", "-c", cfg)
	if code == exitOK || !strings.Contains(stderr, `data_sources[1].name: unknown data source "no.such"`) || !strings.Contains(stderr, "they serve: example.counter") {
		t.Fatalf("validate: exit %d, stderr %q", code, stderr)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`plugin_dir: %q
buffers: [{size_kb: 1024}]
data_sources: [{name: example.counter, config: {packets: -3}}]
sinks: [{type: file, path: out.pftrace}]
`, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runCLI(t, "validate", "-c", cfg)
	if code == exitOK || !strings.Contains(stderr, "data_sources[0].config.packets: must be >= 0, got -3") {
		t.Fatalf("validate: exit %d, stderr %q", code, stderr)
	}
}

// A run whose data source names no plugin finds it in plugin_dir, here
// "." beside the config (and `tracepipe plugins --dir .` lists it too):
// the counter plugin's packets are in the trace.
func TestRunFindsPluginInPluginDir(t *testing.T) {
	dir := t.TempDir()
	plugin, err := os.ReadFile(examplePlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tracepipe-plugin-counter"), plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "found.pftrace")
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`plugin_dir: .
duration: 0s
buffers: [{size_kb: 1024}]
data_sources: [{name: example.counter, config: {packets: 50}}]
sinks: [{type: file, path: %q}]
`, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runCLI(t, "run", "-c", cfg); code != exitOK {
		t.Fatalf("run: exit %d, stderr %s", code, stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := tracefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pid := 0 // packets stamped with a pid other than ours: the plugin's
	for _, p := range pkts {
		if info, err := tracefile.DecodePacket(p); err == nil && info.HasTrustedPID && int(info.TrustedPID) != os.Getpid() {
			pid++
		}
	}
	if pid < 50 {
		t.Fatalf("%d packets from the plugin process, want its 50", pid)
	}
	t.Chdir(dir)
	stdout, stderr, code := runCLI(t, "plugins", "--dir", ".")
	if code != exitOK || !strings.Contains(stdout, "example.counter") {
		t.Fatalf("plugins --dir .: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
}

// A plugin directory's files that do not follow the naming convention
// (tracepipe-plugin-*) are never run: `plugins --dir /usr/bin` ran every
// program there. Here a program that is not a plugin would leave a mark.
func TestPluginsRunsOnlyNamedPlugins(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(t.TempDir(), "ran")
	script := "#!/bin/sh\necho ran >> " + mark + "\n"
	if err := os.WriteFile(filepath.Join(dir, "ls"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "plugins", "--dir", dir)
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("plugins --dir ran a program not named tracepipe-plugin-*")
	}
	if code != exitOK || stdout != "no plugins in "+dir+" (a plugin is an executable named tracepipe-plugin-*)\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// One rule for relative paths in a config file: a file sink's path is the
// config file's directory's, like a plugin's (it was the working
// directory's); -o stays the working directory's.
func TestRelativePathsFollowTheConfigFile(t *testing.T) {
	confDir, work := t.TempDir(), t.TempDir()
	plugin, err := os.ReadFile(examplePlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "counter"), plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(confDir, "c.yaml")
	if err := os.WriteFile(cfg, []byte(`duration: 0s
buffers: [{size_kb: 1024}]
data_sources: [{name: example.counter, plugin: ./counter, config: {packets: 5}}]
sinks: [{type: file, path: traces/rel.pftrace}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(confDir, "traces"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(work)
	if _, stderr, code := runCLI(t, "run", "-c", cfg); code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(confDir, "traces", "rel.pftrace")); err != nil {
		t.Errorf("the sink path was not taken relative to the config file: %v", err)
	}
	if _, stderr, code := runCLI(t, "run", "-c", cfg, "-o", "cli.pftrace"); code != exitOK {
		t.Fatalf("run -o: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(work, "cli.pftrace")); err != nil {
		t.Errorf("-o was not taken relative to the working directory: %v", err)
	}
}
