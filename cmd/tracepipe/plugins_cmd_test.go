package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `tracepipe plugins` lists what each plugin serves; with plugin_dir a
// data source is found by name alone, and validate asks that plugin.
func TestPluginsDiscovery(t *testing.T) {
	dir := t.TempDir()
	plugin, err := os.ReadFile(examplePlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "counter"), plugin, 0o755); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "plugins", "--dir", dir)
	for _, want := range []string{filepath.Join(dir, "counter"), "  example.counter  writes a fixed number", "    config.packets (integer, default 100)  number of packets"} {
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
