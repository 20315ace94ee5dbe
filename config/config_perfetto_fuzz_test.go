package config

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// FuzzTraceConfigText feeds arbitrary bytes as a Perfetto text config
// (`tracepipe run -c x.pbtxt`: an untrusted file). Properties: no panic, no
// hang; every error has a message naming the file; a config that parses
// serializes to a TraceConfig that parses back to the same message; one
// that maps to a session validates again unchanged. Seeds:
// testdata/fuzz/FuzzTraceConfigText and the ones added here.
func FuzzTraceConfigText(f *testing.F) {
	f.Add([]byte("buffers { size_kb: 1024 fill_policy: DISCARD }\ndata_sources { config { name: \"linux.sys_stats\" sys_stats_config { meminfo_period_ms: 500 meminfo_counters: MEMINFO_MEM_TOTAL } } }\nduration_ms: 1000\n"))
	f.Add([]byte("buffers { size_kb: 512 }\ndata_sources { config { name: \"track_event\" track_event_config { enabled_categories: \"*\" } } producer_name_filter: \"app\" }\nwrite_into_file: true\nfile_write_period_ms: 200\n"))
	f.Add([]byte("buffers { size_kb: 64 }\ntrigger_config { trigger_mode: STOP_TRACING trigger_timeout_ms: 1000 triggers { name: \"t\" stop_delay_ms: 5 } }\n"))
	f.Add([]byte("data_sources { config { name: \"x\" chrome_config { trace_config: \"{}\" } } }\n"))
	f.Add([]byte("buffers {\n  size_kb: 1\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.pbtxt"
		start := time.Now()
		bin, err := ParseTraceConfigText(name, data)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("parsing took %v", d)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), name) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		var back ipc.TraceConfig
		if err := proto.Unmarshal(bin, &back); err != nil {
			t.Fatalf("serialized config does not parse: %v", err)
		}
		cfg, err := traceConfigFromText(name, data, TraceConfigTextOptions{Output: dir + "/t-{timestamp}.pftrace"})
		if err != nil {
			// Every line names the file (name: or name:line:) and says
			// something.
			for l := range strings.SplitSeq(err.Error(), "\n") {
				if !strings.HasPrefix(l, name+":") || len(l) <= len(name)+2 {
					t.Fatalf("error line %q does not name the file or says nothing: %q", l, err)
				}
			}
			return
		}
		before, err := cfg.Dump()
		if err != nil {
			t.Fatalf("Dump: %v", err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("mapped config does not validate again: %v", err)
		}
		if after, _ := cfg.Dump(); string(after) != string(before) {
			t.Fatalf("Validate changed a valid config:\n%s\n---\n%s", before, after)
		}
	})
}

// FuzzPerfettoConfigYAML feeds arbitrary YAML as a data source's
// perfetto_config (an untrusted config file). Properties: no panic, no
// hang; every problem has a path under the section and a message; what is
// accepted is a DataSourceConfig with no field below 100 (those are
// tracepipe's to set) that parses and re-encodes to the same bytes.
func FuzzPerfettoConfigYAML(f *testing.F) {
	f.Add("sys_stats_config: {meminfo_period_ms: 500, meminfo_counters: [MEMINFO_MEM_TOTAL, 2]}")
	f.Add("ftrace_config:\n  ftrace_events: [sched/sched_switch]\n  compact_sched: {enabled: true}\n  print_filter: {rules: [{prefix: a, allow: true}]}\n")
	f.Add("process_stats_config: {quirks: [DISABLE_ON_DEMAND], scan_all_processes_on_start: true, proc_stats_poll_ms: 1000}")
	f.Add("track_event_config: {enabled_categories: ['*'], timestamp_unit_multiplier: 18446744073709551615}")
	f.Add("chrome_config: CgJ7fQ==\nlegacy_config: x\n")
	f.Add("name: x\nsys_stats_config: {meminfo_perid_ms: 1}\n")
	f.Fuzz(func(t *testing.T, text string) {
		var v any
		if yaml.Unmarshal([]byte(text), &v) != nil || tooDeep(v, 1) {
			return
		}
		m, ok := asMap(v)
		if !ok {
			return
		}
		const path = "data_sources[0].perfetto_config"
		k := &checker{}
		start := time.Now()
		b := encodePerfettoConfig(k, path, normalizeFree(m).(map[string]any))
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("encoding took %v", d)
		}
		if len(k.problems) > 0 {
			for _, p := range k.problems {
				if !strings.HasPrefix(p.Path, path) || p.Message == "" {
					t.Fatalf("problem %#v", p)
				}
			}
			if b != nil {
				t.Fatal("bytes despite problems")
			}
			return
		}
		var dsc ipc.DataSourceConfig
		if err := proto.Unmarshal(b, &dsc); err != nil {
			t.Fatalf("accepted config does not parse: %v", err)
		}
		if dsc.GetName() != "" || dsc.TargetBuffer != nil || dsc.TracingSessionId != nil {
			t.Fatalf("a service field got through: %v", &dsc)
		}
		again, err := proto.Marshal(&dsc)
		if err != nil || string(again) != string(b) {
			t.Fatalf("re-encoding differs (%v): %x vs %x", err, again, b)
		}
	})
}
