package config

import (
	"os"
	"path/filepath"
	"testing"
)

// loadYAML loads a config from YAML text (through the real loader).
func loadYAML(t testing.TB, text string, sets ...string) *Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "session.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(LoadOptions{Path: path, Sets: sets})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}
