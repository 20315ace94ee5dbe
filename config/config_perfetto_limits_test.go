package config

import (
	"strings"
	"testing"
	"time"
)

// The perfetto: section's socket bounds load, and bad ones are refused
// naming the field.
func TestPerfettoSocketBoundsConfig(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "c.yaml", okYAML+"perfetto: {max_connections: 64, max_connections_per_uid: 8, init_timeout: 2s}\n")
	cfg, err := Load(LoadOptions{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Perfetto; c.MaxConnections != 64 || c.MaxConnectionsPerUID != 8 || c.InitTimeout != 2*time.Second {
		t.Fatalf("perfetto section %+v", c)
	}
	p = writeFile(t, dir, "bad.yaml", okYAML+"perfetto: {max_connections: -1, max_connections_per_uid: -2, init_timeout: -1s}\n")
	_, err = Load(LoadOptions{Path: p})
	want := []string{
		"perfetto.max_connections: must be >= 0 (0: 256), got -1",
		"perfetto.max_connections_per_uid: must be >= 0 (0: a quarter of max_connections), got -2",
		"perfetto.init_timeout: must be >= 0 (0: 10s) and <= 1h, got -1s",
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v, want it to say %q", err, w)
		}
	}
}
