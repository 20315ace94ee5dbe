package config

import (
	"testing"

	"github.com/tracepipe/tracepipe/sinks"
)

// TestWritesStdout: a file sink whose path is "-", given flat or in its
// file section, writes to standard output; another sink type's "-" and a
// file sink's named file do not.
func TestWritesStdout(t *testing.T) {
	for _, c := range []struct {
		name string
		s    sinks.Config
		want bool
	}{
		{"flat", sinks.Config{Type: sinks.SinkTypeFile, Path: sinks.StdoutPath}, true},
		{"section", sinks.Config{Type: sinks.SinkTypeFile, Sections: map[string]map[string]any{sinks.SinkTypeFile: {"path": sinks.StdoutPath}}}, true},
		{"named file", sinks.Config{Type: sinks.SinkTypeFile, Path: "t.pftrace"}, false},
		{"other type", sinks.Config{Type: "relay", Path: sinks.StdoutPath}, false},
	} {
		cfg := &Config{Sinks: []sinks.Config{{Type: sinks.SinkTypeFile, Path: "first.pftrace"}, c.s}}
		if got := cfg.WritesStdout(); got != c.want {
			t.Errorf("%s: WritesStdout = %v, want %v", c.name, got, c.want)
		}
	}
}
