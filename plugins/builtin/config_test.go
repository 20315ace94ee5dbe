package builtin

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/plugins"
)

func TestConfigDefaults(t *testing.T) {
	for _, m := range []map[string]any{nil, {}} {
		if c, err := ParseSyntheticConfig(m); err != nil || c != (SyntheticConfig{Writers: 1, PacketSize: 200, Names: 32, CounterEvery: 8}) {
			t.Errorf("synthetic defaults %+v %v", c, err)
		}
		if c, err := ParseProcessStatsConfig(m); err != nil || c != (ProcessStatsConfig{ScanAllProcessesOnStart: true, RecordThreadNames: true}) {
			t.Errorf("process_stats defaults %+v %v", c, err)
		}
		if c, err := ParseSysStatsConfig(m); err != nil || c != (SysStatsConfig{1000, 1000, 1000}) {
			t.Errorf("sys_stats defaults %+v %v", c, err)
		}
	}
}

func TestConfigEveryKey(t *testing.T) {
	// Each numeric form a decoder may produce: int (YAML), int64 (TOML),
	// uint64, float64 (JSON), json.Number.
	c, err := ParseSyntheticConfig(map[string]any{
		"writers": 8, "rate": int64(5000), "packet_size": float64(1024), "max_packets": uint64(1e6),
		"names": json.Number("1000"), "counter_every": int32(0), "deterministic_timestamps": true,
	})
	want := SyntheticConfig{Writers: 8, Rate: 5000, PacketSize: 1024, MaxPackets: 1e6, Names: 1000, CounterEvery: 0, DeterministicTimestamps: true}
	if err != nil || c != want {
		t.Errorf("synthetic %+v %v, want %+v", c, err, want)
	}
	c, err = ParseSyntheticConfig(map[string]any{"writers": 1024, "packet_size": 1 << 20, "names": 1_000_000, "rate": uint8(0)})
	if err != nil || c.Writers != 1024 || c.PacketSize != 1<<20 || c.Names != 1_000_000 {
		t.Errorf("synthetic maxima %+v %v", c, err)
	}
	p, err := ParseProcessStatsConfig(map[string]any{"scan_all_processes_on_start": false, "record_thread_names": false, "proc_stats_poll_ms": 100.0})
	if err != nil || p != (ProcessStatsConfig{ProcStatsPollMs: 100}) {
		t.Errorf("process_stats %+v %v", p, err)
	}
	s, err := ParseSysStatsConfig(map[string]any{"meminfo_period_ms": 10, "vmstat_period_ms": 0, "stat_period_ms": int64(250)})
	if err != nil || s != (SysStatsConfig{10, 0, 250}) {
		t.Errorf("sys_stats %+v %v", s, err)
	}
}

func TestConfigErrors(t *testing.T) {
	synthetic := func(m map[string]any) error { _, err := ParseSyntheticConfig(m); return err }
	procStats := func(m map[string]any) error { _, err := ParseProcessStatsConfig(m); return err }
	sysStats := func(m map[string]any) error { _, err := ParseSysStatsConfig(m); return err }
	for _, c := range []struct {
		parse func(map[string]any) error
		m     map[string]any
		want  []string
	}{
		{synthetic, map[string]any{"pakcet_size": 100}, []string{"pakcet_size: unknown key (did you mean packet_size?)"}},
		{synthetic, map[string]any{"Rate": 1}, []string{"Rate: unknown key (did you mean rate?)"}},
		{synthetic, map[string]any{"speed": 1}, []string{"speed: unknown key (known keys: writers, rate, packet_size, max_packets, names, counter_every, deterministic_timestamps, trigger, trigger_after_packets, trigger_after_ms, trigger_every_ms)"}},
		{synthetic, map[string]any{"rate": -5}, []string{"rate: must be >= 0, got -5"}},
		{synthetic, map[string]any{"rate": "fast"}, []string{`rate: must be an integer, got string "fast"`}},
		{synthetic, map[string]any{"rate": nil}, []string{"rate: must be an integer, got null"}},
		{synthetic, map[string]any{"writers": 0}, []string{"writers: must be between 1 and 1024, got 0"}},
		{synthetic, map[string]any{"writers": 1025}, []string{"writers: must be between 1 and 1024, got 1025"}},
		{synthetic, map[string]any{"writers": 1.5}, []string{"writers: must be an integer, got 1.5"}},
		{synthetic, map[string]any{"writers": []any{1}}, []string{"writers: must be an integer, got a list"}},
		{synthetic, map[string]any{"packet_size": 10}, []string{"packet_size: must be between 64 and 1048576, got 10"}},
		{synthetic, map[string]any{"packet_size": 1<<20 + 1}, []string{"packet_size: must be between 64 and 1048576, got 1048577"}},
		{synthetic, map[string]any{"max_packets": uint64(1 << 63)}, []string{"max_packets: must be an integer <= 9223372036854775807, got 9223372036854775808"}},
		{synthetic, map[string]any{"max_packets": 1e300}, []string{"max_packets: must be an integer, got 1e+300"}},
		{synthetic, map[string]any{"names": 0}, []string{"names: must be between 1 and 1000000, got 0"}},
		{synthetic, map[string]any{"counter_every": -1}, []string{"counter_every: must be >= 0, got -1"}},
		{synthetic, map[string]any{"deterministic_timestamps": "yes"}, []string{`deterministic_timestamps: must be a bool, got string "yes"`}},
		{synthetic, map[string]any{"deterministic_timestamps": 1}, []string{"deterministic_timestamps: must be a bool, got number 1"}},
		// Every problem at once: unknown keys first (sorted), then known
		// keys in documentation order.
		{synthetic, map[string]any{"rate": -1, "writers": true, "bogus": 1, "Rate": 1, "names": "many", "packet_size": 32},
			[]string{
				"Rate: unknown key (did you mean rate?)",
				"bogus: unknown key (known keys: writers, rate, packet_size, max_packets, names, counter_every, deterministic_timestamps, trigger, trigger_after_packets, trigger_after_ms, trigger_every_ms)",
				"writers: must be an integer, got bool true",
				"rate: must be >= 0, got -1",
				"packet_size: must be between 64 and 1048576, got 32",
				`names: must be an integer, got string "many"`,
			}},
		{procStats, map[string]any{"proc_stats_poll_ms": 50}, []string{"proc_stats_poll_ms: must be 0 (off) or >= 100, got 50"}},
		{procStats, map[string]any{"proc_stats_poll_ms": -1}, []string{"proc_stats_poll_ms: must be 0 (off) or >= 100, got -1"}},
		{procStats, map[string]any{"record_thread_name": true}, []string{"record_thread_name: unknown key (did you mean record_thread_names?)"}},
		{procStats, map[string]any{"scan_all_processes_on_start": 1, "record_thread_names": "true"}, []string{
			"scan_all_processes_on_start: must be a bool, got number 1",
			`record_thread_names: must be a bool, got string "true"`,
		}},
		{sysStats, map[string]any{"meminfo_period_ms": 5}, []string{"meminfo_period_ms: must be 0 (off) or >= 10, got 5"}},
		{sysStats, map[string]any{"vmstat_period": 100, "stat_period_ms": -1, "meminfo_period_ms": 9.0}, []string{
			"vmstat_period: unknown key (did you mean vmstat_period_ms?)",
			"meminfo_period_ms: must be 0 (off) or >= 10, got 9",
			"stat_period_ms: must be 0 (off) or >= 10, got -1",
		}},
	} {
		err := c.parse(c.m)
		if err == nil {
			t.Errorf("%v: no error, want %q", c.m, c.want)
			continue
		}
		if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v:\n got %q\nwant %q", c.m, got, c.want)
		}
		// errors.Join: one wrapped error per problem.
		if u, ok := err.(interface{ Unwrap() []error }); !ok || len(u.Unwrap()) != len(c.want) {
			t.Errorf("%v: error is not one joined error per problem", c.m)
		}
	}
}

func TestRegisteredFactories(t *testing.T) {
	names := plugins.Names()
	for _, n := range []string{SyntheticName, ProcessStatsName, SysStatsName} {
		f, ok := plugins.Lookup(n)
		if !ok {
			t.Fatalf("%s not registered (have %v)", n, names)
		}
		ds, err := f(nil)
		if err != nil || ds == nil {
			t.Fatalf("%s with a nil config: %v", n, err)
		}
		// Unstarted instances accept every call.
		ds.ClearIncrementalState()
		if err := ds.Flush(); err != nil {
			t.Fatalf("%s: Flush before Start: %v", n, err)
		}
		if err := ds.Stop(); err != nil {
			t.Fatalf("%s: Stop before Start: %v", n, err)
		}
		if _, err := f(map[string]any{"nope": 1}); err == nil || !strings.HasPrefix(err.Error(), "nope: unknown key") {
			t.Fatalf("%s: unknown key: %v", n, err)
		}
	}
	if ds, _ := plugins.Lookup(SyntheticName); ds != nil {
		d, _ := ds(map[string]any{"writers": 3})
		if s, ok := d.(*Synthetic); !ok || s.Config().Writers != 3 {
			t.Fatalf("factory returned %T", d)
		}
	}
}

func TestSuggest(t *testing.T) {
	keys := []string{"writers", "rate", "packet_size", "max_packets"}
	for in, want := range map[string]string{
		"writer": "writers", "wirters": "writers", "RATE": "rate", "packetsize": "packet_size",
		"max_packet": "max_packets", "xyz": "", "packets": "", "": "",
	} {
		if got := suggest(in, keys); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStatsAnytime calls Stats from another goroutine throughout each
// source's life (the race detector checks it).
func TestStatsAnytime(t *testing.T) {
	root := buildFakeProc(t)
	ps := NewProcessStats(DefaultProcessStatsConfig())
	ps.procRoot = root
	sources := []interface {
		plugins.DataSource
		Stats() Stats
	}{NewSynthetic(DefaultSyntheticConfig()), ps, NewSysStats(SysStatsConfig{StatPeriodMs: 10})}
	for _, ds := range sources {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 200 {
				_ = ds.Stats()
			}
		}()
		h := &fakeHost{discard: true}
		if err := ds.Start(h); err != nil {
			t.Fatal(err)
		}
		if err := ds.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := ds.Stop(); err != nil {
			t.Fatal(err)
		}
		<-done
		if ds.Stats().Packets == 0 {
			t.Errorf("%T wrote nothing", ds)
		}
	}
}
