package names

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, s := range []string{"a", "_x", "0", "boot.done:2-a", strings.Repeat("a", MaxLen)} {
		if err := Valid("trigger", s); err != nil {
			t.Errorf("Valid(%q) = %v, want nil", s, err)
		}
	}
	for s, want := range map[string]string{
		"":                            "trigger name is empty",
		".x":                          `trigger name ".x"`,
		"-x":                          `trigger name "-x"`,
		"a b":                         `trigger name "a b"`,
		"a/b":                         `trigger name "a/b"`,
		"é":                           `trigger name "é"`,
		strings.Repeat("a", MaxLen+1): "129 bytes; the limit is 128",
	} {
		err := Valid("trigger", s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Valid(%q) = %v, want an error containing %q", s, err, want)
		}
	}
}
