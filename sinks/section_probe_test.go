package sinks

import (
	"slices"
	"testing"
)

// SectionKeysOf reports the keys a factory reads, with their kinds, by
// running the factory itself; a config file cannot smuggle the probe in.
func TestSectionKeysOfFile(t *testing.T) {
	keys, ok := SectionKeysOf(SinkTypeFile)
	if !ok {
		t.Fatal("file sink not registered")
	}
	want := []SectionKey{{Name: "path", Kind: "string"}, {Name: "compression", Kind: "string"}, {Name: "max_file_size", Kind: "byte size"},
		{Name: "fsync_period", Kind: "duration"}, {Name: "buffer_size", Kind: "byte size"}, {Name: "disk_full_retry_max", Kind: "duration"}}
	if !slices.EqualFunc(keys, want, func(a, b SectionKey) bool { return a.Name == b.Name && a.Kind == b.Kind }) {
		t.Errorf("file keys %+v, want %+v", keys, want)
	}
	if _, ok := SectionKeysOf("nosuch"); ok {
		t.Error("an unregistered type has keys")
	}
	// A section holding the probe key's name with another value is an
	// ordinary section: the key is unknown.
	err := Config{Type: SinkTypeFile, Sections: map[string]map[string]any{SinkTypeFile: {"path": "x.pftrace", probeKey: "x"}}}.Validate()
	if err == nil {
		t.Error("a section with the probe key's name as a string validated")
	}
}
