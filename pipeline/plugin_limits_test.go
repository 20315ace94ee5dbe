package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/transport/goplugin"
)

// data_sources[i].limits decodes sizes and durations, and each bad value
// is reported at its field path with the rule it breaks.
func TestPluginLimitsConfig(t *testing.T) {
	exe, err := os.Executable() // any executable stands for the plugin
	if err != nil {
		t.Fatal(err)
	}
	load := func(ds string) (*config.Config, error) {
		dir := t.TempDir()
		path := filepath.Join(dir, "c.yaml")
		text := fmt.Sprintf("buffers: [{size_kb: 1024}]\nsinks: [{type: file, path: out.pftrace}]\ndata_sources:\n  - %s\n", ds)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return config.Load(config.LoadOptions{Path: path})
	}
	plugin := fmt.Sprintf("{name: x.y, plugin: %q, ", exe)

	cfg, err := load(plugin + "limits: {memory: 256MiB, cpu: 90s, stderr_lines_per_second: 10, stderr_bytes_per_second: 4KiB}}")
	if err != nil {
		t.Fatal(err)
	}
	want := config.PluginLimits{Memory: 256 << 20, CPU: 90 * time.Second, StderrLinesPerSecond: 10, StderrBytesPerSecond: 4096}
	if got := cfg.DataSources[0].Limits; got == nil || *got != want {
		t.Fatalf("limits decoded as %+v, want %+v", got, want)
	}
	if hl := goplugin.HostLimits(got(cfg)); hl.Memory != 256<<20 || hl.CPU != 90*time.Second {
		t.Errorf("host limits %+v", hl)
	}
	if lines, bytes := got(cfg).StderrRates(); lines != 10 || bytes != 4096 {
		t.Errorf("stderr rates %v, %v", lines, bytes)
	}
	cfg, err = load(plugin + "limits: {memory: 1073741824}}")
	if err != nil {
		t.Fatal(err)
	}
	if lines, bytes := got(cfg).StderrRates(); got(cfg).Memory != 1<<30 || lines != config.DefaultStderrLinesPerSecond || bytes != config.DefaultStderrBytesPerSecond {
		t.Errorf("limits %+v, stderr rates %v, %v: want 1 GiB and the default rates", got(cfg), lines, bytes)
	}
	if lines, bytes := (*config.PluginLimits)(nil).StderrRates(); lines != config.DefaultStderrLinesPerSecond || bytes != config.DefaultStderrBytesPerSecond {
		t.Errorf("no limits section: stderr rates %v, %v, want the defaults", lines, bytes)
	}

	for _, c := range []struct{ ds, want string }{
		{plugin + "limits: {memory: 1MiB}}", "data_sources[0].limits.memory: must be 0 (no limit) or in 16MiB..1TiB, got 1048576 bytes"},
		{plugin + "limits: {memory: lots}}", `data_sources[0].limits.memory: want a byte count or a size like "64MiB", got "lots"`},
		{plugin + "limits: {cpu: 500ms}}", "data_sources[0].limits.cpu: must be 0 (no limit) or in 1s..1000h, got 500ms"},
		{plugin + "limits: {cpu: 10}}", `data_sources[0].limits.cpu: want a duration like "10s", got 10`},
		{plugin + "limits: {stderr_lines_per_second: 2000000}}", "data_sources[0].limits.stderr_lines_per_second: must be in 0..1000000 (0: 100), got 2000000"},
		{plugin + "limits: {stderr_bytes_per_second: 10}}", "data_sources[0].limits.stderr_bytes_per_second: must be 0 (65536) or in 1KiB..1GiB, got 10"},
		{plugin + "limits: {memroy: 1GiB}}", "data_sources[0].limits.memroy: unknown key (did you mean memory?)"},
		{"{name: test.fake, limits: {memory: 1GiB}}", "data_sources[0].limits: limits apply to plugin data sources only (this one runs inside tracepipe)"},
	} {
		_, err := load(c.ds)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.ds, err, c.want)
		}
	}
}

func got(cfg *config.Config) *config.PluginLimits { return cfg.DataSources[0].Limits }

// test.fake stands for an in-process data source in TestPluginLimitsConfig.
func init() {
	plugins.Register("test.fake", func(map[string]any) (plugins.DataSource, error) { return nil, nil })
}
