package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// The table the docs are generated from is what ConfigFromTraceConfig
// does: each field, set on an otherwise valid TraceConfig, is refused by
// its name exactly when the table says refused; a mapped field changes
// the session config, an accepted one leaves it as it was.
func TestPerfettoTraceConfigFieldsAreTheMapping(t *testing.T) {
	enums := map[string]bool{"FillPolicy": true, "ExperimentalMode": true, "LockdownModeOperation": true, "TriggerMode": true,
		"CompressionType": true, "StatsdLogging": true, "WriteFlushMode": true, "FFlushMode": true}
	synthetic := testsupport.Msg(1, "tracepipe.synthetic")
	trigger := testsupport.Msg(1, "x")
	// Values that make a valid config and differ from the base's.
	values := map[string]any{
		"buffers":                                  testsupport.Msg(1, uint64(4096)),
		"buffers[].size_kb":                        uint64(8192),
		"buffers[].fill_policy":                    uint64(2),
		"data_sources":                             testsupport.Msg(1, synthetic),
		"data_sources[].config":                    testsupport.Msg(1, "tracepipe.synthetic", 1001, "for-the-producer"),
		"duration_ms":                              uint64(2000),
		"file_write_period_ms":                     uint64(1000),
		"max_file_size_bytes":                      uint64(1 << 20),
		"flush_period_ms":                          uint64(1000),
		"flush_timeout_ms":                         uint64(1000),
		"trigger_config":                           testsupport.Msg(1, uint64(2), 2, trigger, 3, uint64(1000)),
		"trigger_config.trigger_mode":              uint64(1),
		"trigger_config.triggers":                  testsupport.Msg(1, "y"),
		"trigger_config.triggers[].name":           "z",
		"trigger_config.triggers[].stop_delay_ms":  uint64(10),
		"trigger_config.trigger_timeout_ms":        uint64(2000),
		"incremental_state_config":                 testsupport.Msg(1, uint64(1000)),
		"incremental_state_config.clear_period_ms": uint64(1000),
	}
	// Each parent message, built around the field under test (nil: none).
	base := func(extra ...any) []byte {
		return testsupport.Msg(append([]any{1, testsupport.Msg(1, uint64(4096)), 2, testsupport.Msg(1, synthetic), 3, uint64(1000)}, extra...)...)
	}
	wrap := map[string]func(f []byte) []byte{
		"": func(f []byte) []byte { return append(base(), f...) },
		"buffers[]": func(f []byte) []byte {
			return testsupport.Msg(1, append(testsupport.Msg(1, uint64(4096)), f...), 2, testsupport.Msg(1, synthetic), 3, uint64(1000))
		},
		"data_sources[]": func(f []byte) []byte {
			return testsupport.Msg(1, testsupport.Msg(1, uint64(4096)), 2, append(testsupport.Msg(1, synthetic), f...), 3, uint64(1000))
		},
		"trigger_config": func(f []byte) []byte {
			return base(17, append(testsupport.Msg(1, uint64(2), 2, trigger, 3, uint64(1000)), f...))
		},
		"trigger_config.triggers[]": func(f []byte) []byte {
			return base(17, testsupport.Msg(1, uint64(2), 2, append(testsupport.Msg(1, "x"), f...), 3, uint64(1000)))
		},
		"incremental_state_config": func(f []byte) []byte { return base(21, f) },
	}
	// Mapped fields EnableTracing reads from the TraceConfig itself, not
	// from the session config (tested through the consumer port:
	// deferred_start, CloneSession by unique_session_name).
	outsideConfig := map[string]bool{"deferred_start": true, "unique_session_name": true}

	seen := map[string]bool{}
	for _, f := range traceConfigFields {
		parent := fieldParent(f.path)
		key := fmt.Sprintf("%s#%d", parent, f.num)
		if seen[f.path] || seen[key] {
			t.Errorf("%s (%d) is listed twice", f.path, f.num)
		}
		seen[f.path], seen[key] = true, true
		w, ok := wrap[parent]
		if !ok {
			t.Errorf("%s: no test builder for its message %q", f.path, parent)
			continue
		}
		v, ok := values[f.path]
		if !ok {
			switch {
			case f.typ == "string":
				v = "x"
			case f.typ == "double":
				v = 0.5
			case f.typ == "bool" || enums[f.typ] || strings.HasPrefix(f.typ, "uint") || strings.HasPrefix(f.typ, "int"):
				v = uint64(1)
			default:
				v = []byte{} // a message
			}
		}
		field := testsupport.Msg(int(f.num), v)
		if f.path == "buffers[].clear_before_clone" {
			field = append(testsupport.Msg(5, uint64(1)), field...) // it needs transfer_on_clone
		}
		cfg, err := ConfigFromTraceConfig(w(field))
		want := strings.ReplaceAll(f.path, "[]", "[0]")
		if f.support == fieldRefused {
			const prefix = "trace_config: not supported by tracepipe: "
			if err == nil || !strings.HasPrefix(err.Error(), prefix) ||
				!slices.Contains(strings.Split(strings.TrimPrefix(err.Error(), prefix), ", "), want) {
				t.Errorf("%s: %v; the table says it is refused by that name", f.path, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v; the table says %s", f.path, err, f.support)
			continue
		}
		var without []byte
		if f.path == "buffers[].clear_before_clone" {
			without = testsupport.Msg(5, uint64(1))
		}
		before, err := ConfigFromTraceConfig(w(without))
		if err != nil {
			t.Fatalf("%s: the config without it: %v", f.path, err)
		}
		changed := !reflect.DeepEqual(cfg, before)
		switch {
		case f.path == "activate_triggers":
			before.perfettoActivateTriggers = []string{"x"}
			if !reflect.DeepEqual(cfg, before) {
				t.Errorf("activate_triggers changed the session config beyond its warning")
			}
		case f.support == fieldMapped && !changed && !outsideConfig[f.path]:
			t.Errorf("%s: the table says mapped; the session config is the same without it", f.path)
		case f.support == fieldIgnored && changed:
			t.Errorf("%s: the table says no effect; it changed the session config", f.path)
		}
	}
	if _, err := ConfigFromTraceConfig(append(base(), testsupport.Msg(999, uint64(1))...)); err == nil || !strings.HasSuffix(err.Error(), "field 999") {
		t.Errorf("an unknown field: %v", err)
	}
}
