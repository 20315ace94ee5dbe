package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// Every mistake in perfetto_config is a problem at its field path, all
// reported at once; a config section nothing reads is an error.
func TestPerfettoConfigYAMLProblems(t *testing.T) {
	for _, tc := range []struct {
		name, ds string
		perfetto bool
		want     []string // "path: message part"
	}{
		{"unknown field", `{name: linux.sys_stats, perfetto_config: {sys_stats_config: {meminfo_perid_ms: 500}}}`, true,
			[]string{"data_sources[0].perfetto_config.sys_stats_config.meminfo_perid_ms: unknown field (SysStatsConfig has: "}},
		{"unknown config", `{name: x.y, perfetto_config: {sys_stat_config: {}}}`, true,
			[]string{"data_sources[0].perfetto_config.sys_stat_config: unknown field", "sys_stats_config"}},
		{"bad enum", `{name: linux.sys_stats, perfetto_config: {sys_stats_config: {meminfo_counters: [MEMINFO_NOPE, 9999]}}}`, true,
			[]string{`data_sources[0].perfetto_config.sys_stats_config.meminfo_counters[0]: "MEMINFO_NOPE" is not a value of MeminfoCounters`,
				"data_sources[0].perfetto_config.sys_stats_config.meminfo_counters[1]: 9999 is not a value of MeminfoCounters"}},
		{"types", `{name: linux.sys_stats, perfetto_config: {sys_stats_config: {meminfo_period_ms: -1, vmstat_period_ms: 5000000000, stat_period_ms: fast, meminfo_counters: MEMINFO_MEM_TOTAL}}}`, true,
			[]string{"sys_stats_config.meminfo_period_ms: -1 is out of range for uint32",
				"sys_stats_config.vmstat_period_ms: 5000000000 is out of range",
				"sys_stats_config.stat_period_ms: want an integer (uint32)",
				"sys_stats_config.meminfo_counters: want a list"}},
		{"service fields", `{name: linux.sys_stats, perfetto_config: {name: other, target_buffer: 1, tracing_session_id: 3}}`, true,
			[]string{"perfetto_config.name: not a data-source config: the data source's name is data_sources[i].name",
				"perfetto_config.target_buffer: not a data-source config",
				"perfetto_config.tracing_session_id: not a data-source config: the service sets it"}},
		{"base64", `{name: x.y, perfetto_config: {chrome_config: "not base64!", heapprofd_config: "/w=="}}`, true,
			[]string{"perfetto_config.chrome_config: want base64", "perfetto_config.heapprofd_config: the base64 bytes are not a serialized protobuf message"}},
		{"message as scalar", `{name: x.y, perfetto_config: {ftrace_config: [a]}}`, true,
			[]string{"perfetto_config.ftrace_config: want a map (FtraceConfig)"}},
		{"oneof", `{name: x.y, perfetto_config: {ftrace_config: {print_filter: {rules: [{prefix: a, atrace_msg: {type: B}}]}}}}`, true,
			[]string{"print_filter.rules[0].prefix: atrace_msg and prefix are alternatives"}},
		{"config for a producer", `{name: x.y, config: {meminfo_period_ms: 500}}`, true,
			[]string{`data_sources[0].config: nothing reads it: "x.y" is served by Perfetto producers`, "data_sources[0].perfetto_config"}},
		// A built-in's name with both sections: whichever serves it (a
		// producer, or the built-in when none registers), one section has
		// no reader, so validate says so instead of run failing later.
		{"both sections", `{name: linux.sys_stats, config: {meminfo_period_ms: 100}, perfetto_config: {sys_stats_config: {meminfo_period_ms: 500}}}`, true,
			[]string{"data_sources[0].config: nothing reads it", "data_sources[0].perfetto_config"}},
		{"perfetto off", `{name: linux.sys_stats, perfetto_config: {sys_stats_config: {meminfo_period_ms: 500}}}`, false,
			[]string{"data_sources[0].perfetto_config: nothing reads it: only Perfetto producers do, and perfetto.enabled is false"}},
		{"plugin", `{name: x.y, plugin: /bin/true, perfetto_config: {}}`, true,
			[]string{"data_sources[0].perfetto_config: nothing reads it: a plugin serves this data source"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := "duration: 1s\nbuffers: [{size_kb: 1024}]\ndata_sources: [" + tc.ds + "]\nsinks: [{type: file, path: " +
				filepath.Join(t.TempDir(), "t.pftrace") + "}]\n"
			if tc.perfetto {
				text += "perfetto: {enabled: true}\n"
			}
			path := writeFile(t, t.TempDir(), "c.yaml", text)
			_, err := Load(LoadOptions{Path: path})
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("want a ValidationError, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("problems\n%v\ndo not say %q", err, w)
				}
			}
		})
	}
}
