// Package cfgtest loads session configs for tests of the packages above
// config (pipeline, perfettosvc, transport/...), through the real loader.
// It is for tests only: no production code imports it. Package config's
// own tests cannot use it (it imports config); they use it from an
// external test package (config_test).
package cfgtest

import (
	"testing"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// LoadYAML loads a session config from YAML text with config.Load (sets
// are --set overrides), failing t if the text is refused.
func LoadYAML(t testing.TB, text string, sets ...string) *config.Config {
	t.Helper()
	path := testsupport.WriteTempFile(t, "session.yaml", []byte(text))
	cfg, err := config.Load(config.LoadOptions{Path: path, Sets: sets})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}
