package config_test

// Tests that load a config from YAML text the way the packages above
// config do, with cfgtest.LoadYAML; they are an external test package
// because cfgtest imports config, which config's own test files cannot.

import (
	"encoding/base64"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/sinks"
)

// A bare 0 is the one number that means the same in every unit: the
// README's "duration: 0 (until signal)" is accepted as written, and a
// sink's duration key too; any other bare number is still refused
// (config_bad_test.go).
func TestBareZeroDuration(t *testing.T) {
	cfg := cfgtest.LoadYAML(t, `
duration: 0
flush_period: 0
buffers:
  - {name: main, size_kb: 1024}
data_sources:
  - name: test.fake
sinks:
  - {type: file, path: out.pftrace, fsync_period: 0}
`)
	// fsync_period 0 is the default, which the loaded config holds.
	if cfg.Duration != 0 || cfg.FlushPeriod != 0 || cfg.Sinks[0].FsyncPeriod != sinks.DefaultFsyncPeriod {
		t.Fatalf("duration %v, flush_period %v, fsync_period %v: want 0, 0, the default", cfg.Duration, cfg.FlushPeriod, cfg.Sinks[0].FsyncPeriod)
	}
}

// perfetto_config in YAML becomes the DataSourceConfig it describes:
// modelled configs field by field (enums by name or number, lists, nested
// messages), unmodelled ones from base64, untouched.
func TestPerfettoConfigYAMLEncodes(t *testing.T) {
	chrome := []byte{0x0a, 0x02, '{', '}'} // chrome_config.trace_config = "{}"
	cfg := cfgtest.LoadYAML(t, `
duration: 1s
buffers: [{size_kb: 1024}]
perfetto: {enabled: true}
data_sources:
  - name: linux.sys_stats
    perfetto_config:
      sys_stats_config:
        meminfo_period_ms: 500
        meminfo_counters: [MEMINFO_MEM_TOTAL, 2]
        stat_counters: [STAT_CPU_TIMES]
  - name: linux.ftrace
    perfetto_config:
      ftrace_config:
        ftrace_events: [sched/sched_switch, power/cpu_idle]
        compact_sched: {enabled: true}
        kprobe_events: [{probe: do_sys_open, type: KPROBE_TYPE_BOTH}]
  - name: org.chromium.trace_event
    perfetto_config:
      chrome_config: `+base64.StdEncoding.EncodeToString(chrome)+`
sinks: [{type: file, path: `+filepath.Join(t.TempDir(), "t.pftrace")+`}]
`)
	want := []*ipc.DataSourceConfig{
		{SysStatsConfig: &ipc.SysStatsConfig{MeminfoPeriodMs: proto.Uint32(500),
			MeminfoCounters: []ipc.MeminfoCounters{ipc.MeminfoCounters_MEMINFO_MEM_TOTAL, ipc.MeminfoCounters_MEMINFO_MEM_FREE},
			StatCounters:    []ipc.SysStatsConfig_StatCounters{ipc.SysStatsConfig_STAT_CPU_TIMES}}},
		{FtraceConfig: &ipc.FtraceConfig{FtraceEvents: []string{"sched/sched_switch", "power/cpu_idle"},
			CompactSched: &ipc.FtraceConfig_CompactSchedConfig{Enabled: proto.Bool(true)},
			KprobeEvents: []*ipc.FtraceConfig_KprobeEvent{{Probe: proto.String("do_sys_open"), Type: ipc.FtraceConfig_KprobeEvent_KPROBE_TYPE_BOTH.Enum()}}}},
		{ChromeConfig: chrome},
	}
	for i, w := range want {
		b, err := proto.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.DataSources[i].EncodedPerfettoConfig; string(got) != string(b) {
			t.Errorf("data_sources[%d]: encoded %x, want %x", i, got, b)
		}
	}
}
