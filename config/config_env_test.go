package config

import (
	"strings"
	"testing"
)

// TestEnvUnrelatedVariables: TRACEPIPE_* variables whose name does not
// start with a top-level config key belong to something else; Load ignores
// them and warns, naming each variable (and the key it may have meant).
func TestEnvUnrelatedVariables(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.yaml", okYAML)
	var warnings []string
	env := []string{
		"TRACEPIPE_FOO=1",
		"TRACEPIPE_TEST_KILL_CHILD_CONFIG=/tmp/x.yaml",
		"TRACEPIPE_DURATON=1s",
		"TRACEPIPE_=4",
		"TRACEPIPE_0__A=1",
		"TRACEPIPE_DURATION=7s", // config: applied
		"OTHER_FOO=1",           // not ours: silent
	}
	cfg, err := Load(LoadOptions{Path: p, Env: env, Warn: func(m string) { warnings = append(warnings, m) }})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg.Duration.String() != "7s" {
		t.Errorf("duration = %v, want 7s from TRACEPIPE_DURATION", cfg.Duration)
	}
	want := []string{
		"TRACEPIPE_FOO is not a config variable",
		"TRACEPIPE_TEST_KILL_CHILD_CONFIG is not a config variable",
		"TRACEPIPE_DURATON is not a config variable (its name after TRACEPIPE_ starts with no top-level config key (did you mean duration?)); ignored",
		"TRACEPIPE_ is not a config variable",
		"TRACEPIPE_0__A is not a config variable",
	}
	if len(warnings) != len(want) {
		t.Fatalf("warnings:\n%s\nwant %d", strings.Join(warnings, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(warnings[i], w) {
			t.Errorf("warning %d = %q, want prefix %q", i, warnings[i], w)
		}
	}
	// Without a Warn func the variables are still ignored.
	if _, err := Load(LoadOptions{Path: p, Env: env}); err != nil {
		t.Errorf("Load without Warn: %v", err)
	}
}
