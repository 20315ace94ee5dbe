package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/names"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/smb"
)

// Fake data sources for the config tests (the real ones live in
// plugins/builtin, which config_examples_test.go imports).
//
// test.fake knows two keys, rate (an integer >= 0) and mode ("a" or "b"),
// and reports problems the way the builtin factories do: one line per
// problem, "key: message", joined.
// test.any accepts any config. test.panics panics.
func init() {
	plugins.Register("test.fake", fakeFactory)
	plugins.Register("test.any", func(map[string]any) (plugins.DataSource, error) { return nil, nil })
	plugins.Register("test.panics", func(map[string]any) (plugins.DataSource, error) { panic("boom") })
}

func fakeFactory(cfg map[string]any) (plugins.DataSource, error) {
	var errs []error
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := cfg[k]
		switch k {
		case "rate":
			n, ok := v.(int)
			if !ok {
				errs = append(errs, fmt.Errorf("rate: must be an integer, got %v", v))
			} else if n < 0 {
				errs = append(errs, fmt.Errorf("rate: must be >= 0, got %d", n))
			}
		case "mode":
			if v != "a" && v != "b" {
				errs = append(errs, fmt.Errorf("mode: must be a or b, got %v", v))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: unknown key", k))
		}
	}
	return nil, errors.Join(errs...)
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The same session in the three formats.
const goodYAML = `
# every key, none at its default
duration: 1m30s
write_into_file: true
file_write_period: 2s
max_file_size: 64MiB
flush_period: 500ms
flush_timeout: 3s
stats_period: 20s
incremental_state:
  clear_period: 5s
producers:
  smb_size_kb: 1024
  plugin_smb_size_kb: 2048
  smb_page_size_kb: 16
buffers:
  - name: main
    size_kb: 16384
    fill_policy: ring_buffer
  - name: side
    size_kb: 1024
    fill_policy: discard
data_sources:
  - name: test.fake
    target_buffer: 1
    buffer_exhausted_policy: stall
    config:
      rate: 1000
      mode: a
  - name: test.any
    target_buffer_name: main
    config:
      list: [1, 2.5, "x"]
      nested: {deep: 3}
    protovm:
      program: prog.yaml
      memory_limit_kb: 256
sinks:
  - type: file
    path: out/a.pftrace.zst
    compression: zstd
    max_file_size: 2MiB
    fsync_period: 1s
    filter: packet.kind != "sys_stats"
    queue_capacity: 8
  - type: file
    path: out/b.pftrace
`

const goodTOML = `
# every key, none at its default
duration = "1m30s"
write_into_file = true
file_write_period = "2s"
max_file_size = "64MiB"
flush_period = "500ms"
flush_timeout = "3s"
stats_period = "20s"

[incremental_state]
clear_period = "5s"

[producers]
smb_size_kb = 1024
plugin_smb_size_kb = 2048
smb_page_size_kb = 16

[[buffers]]
name = "main"
size_kb = 16384
fill_policy = "ring_buffer"

[[buffers]]
name = "side"
size_kb = 1024
fill_policy = "discard"

[[data_sources]]
name = "test.fake"
target_buffer = 1
buffer_exhausted_policy = "stall"
config = { rate = 1000, mode = "a" }

[[data_sources]]
name = "test.any"
target_buffer_name = "main"
config = { list = [1, 2.5, "x"], nested = { deep = 3 } }
protovm = { program = "prog.yaml", memory_limit_kb = 256 }

[[sinks]]
type = "file"
path = "out/a.pftrace.zst"
compression = "zstd"
max_file_size = "2MiB"
fsync_period = "1s"
filter = 'packet.kind != "sys_stats"'
queue_capacity = 8

[[sinks]]
type = "file"
path = "out/b.pftrace"
`

const goodJSON = `{
  "duration": "1m30s",
  "write_into_file": true,
  "file_write_period": "2s",
  "max_file_size": "64MiB",
  "flush_period": "500ms",
  "flush_timeout": "3s",
  "stats_period": "20s",
  "incremental_state": {"clear_period": "5s"},
  "producers": {"smb_size_kb": 1024, "plugin_smb_size_kb": 2048, "smb_page_size_kb": 16},
  "buffers": [
    {"name": "main", "size_kb": 16384, "fill_policy": "ring_buffer"},
    {"name": "side", "size_kb": 1024, "fill_policy": "discard"}
  ],
  "data_sources": [
    {"name": "test.fake", "target_buffer": 1, "buffer_exhausted_policy": "stall",
     "config": {"rate": 1000, "mode": "a"}},
    {"name": "test.any", "target_buffer_name": "main",
     "config": {"list": [1, 2.5, "x"], "nested": {"deep": 3}},
     "protovm": {"program": "prog.yaml", "memory_limit_kb": 256}}
  ],
  "sinks": [
    {"type": "file", "path": "out/a.pftrace.zst", "compression": "zstd", "max_file_size": "2MiB",
     "fsync_period": "1s", "filter": "packet.kind != \"sys_stats\"", "queue_capacity": 8},
    {"type": "file", "path": "out/b.pftrace"}
  ]
}`

// progYAML is a ProtoVM program description (protovm/testdata/service_program.yaml).
const progYAML = `version: 1
commands:
  - set: {src: [900, 6, 1], dst: [900, 7, 1]}
`

func wantGood(t *testing.T, dir string) *Config {
	t.Helper()
	prog, err := protovm.Compile([]byte(progYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Config{
		Duration:         90 * time.Second,
		WriteIntoFile:    true,
		FileWritePeriod:  2 * time.Second,
		MaxFileSize:      64 << 20,
		FlushPeriod:      500 * time.Millisecond,
		FlushTimeout:     3 * time.Second,
		StatsPeriod:      20 * time.Second,
		IncrementalState: IncrementalStateConfig{ClearPeriod: 5 * time.Second},
		Producers:        ProducersConfig{SMBSizeKB: 1024, PluginSMBSizeKB: 2048, SMBPageSizeKB: 16},
		Buffers: []BufferConfig{
			{Name: "main", SizeKB: 16384, FillPolicy: FillPolicyRingBuffer},
			{Name: "side", SizeKB: 1024, FillPolicy: FillPolicyDiscard},
		},
		DataSources: []DataSourceConfig{
			{Name: "test.fake", TargetBuffer: 1, BufferExhaustedPolicy: BufferExhaustedStall, OnStartError: OnStartErrorContinue,
				Config: map[string]any{"rate": 1000, "mode": "a"}},
			{Name: "test.any", TargetBuffer: 0, TargetBufferName: "main", BufferExhaustedPolicy: BufferExhaustedDrop, OnStartError: OnStartErrorContinue,
				Config:  map[string]any{"list": []any{1, 2.5, "x"}, "nested": map[string]any{"deep": 3}},
				ProtoVM: &ProtoVMConfig{Program: filepath.Join(dir, "prog.yaml"), MemoryLimitKB: 256, Path: ProtoVMPathRestore, ProgramBytes: prog}},
		},
		Sinks: []sinks.Config{
			// Relative sink paths are the config file's directory's;
			// every sink key holds the value the sink uses.
			{Type: "file", Path: filepath.Join(dir, "out/a.pftrace.zst"), Compression: "zstd", MaxFileSize: 2 << 20, FsyncPeriod: time.Second,
				Filter: `packet.kind != "sys_stats"`, QueueCapacity: 8, OnError: "drop", FilterError: "drop", WhenFull: "block"},
			// max_file_size inherited from the top level; on_error drop
			// since the session has another file sink.
			{Type: "file", Path: filepath.Join(dir, "out/b.pftrace"), MaxFileSize: 64 << 20, OnError: "drop",
				FilterError: "drop", WhenFull: "block", QueueCapacity: sinks.DefaultFileQueueCapacity, FsyncPeriod: sinks.DefaultFsyncPeriod},
		},
		baseDir: dir,
	}
}

func TestLoadFormatsAgree(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "prog.yaml", progYAML)
	want := wantGood(t, dir)
	for name, content := range map[string]string{
		"good.yaml": goodYAML, "good.yml": goodYAML, "good.toml": goodTOML, "good.json": goodJSON, "GOOD.YAML": goodYAML,
	} {
		got, err := Load(LoadOptions{Path: writeFile(t, dir, name, content)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", name, got, want)
		}
	}
}

// A relative config path resolves relative paths against the file's
// directory, not the current one.
func TestLoadRelativeToConfigDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "sub/prog.yaml", progYAML)
	p := writeFile(t, dir, "sub/c.yaml", goodYAML)
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(LoadOptions{Path: rel})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.DataSources[1].ProtoVM.Program, filepath.Join(dir, "sub", "prog.yaml"); got != want {
		t.Errorf("program resolved to %q, want %q", got, want)
	}
	if len(c.DataSources[1].ProtoVM.ProgramBytes) == 0 {
		t.Error("ProgramBytes not filled")
	}
	// Validate again (idempotent: the resolved path stays put).
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.DataSources[1].ProtoVM.Program; got != filepath.Join(dir, "sub", "prog.yaml") {
		t.Errorf("after a second Validate the program is %q", got)
	}
}

const baseYAML = `
duration: 10s
buffers:
  - {name: main, size_kb: 1024}
data_sources:
  - name: test.fake
sinks:
  - {type: file, path: out.pftrace}
`

func TestPrecedence(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.yaml", baseYAML)
	env := []string{
		"PATH=/bin", "TRACEPIPE=nothing", "TRACEPIPEDURATION=1s", // not overrides
		"TRACEPIPE_DURATION=20s",
	}
	cases := []struct {
		env  []string
		sets []string
		want time.Duration
	}{
		{nil, nil, 10 * time.Second},
		{env, nil, 20 * time.Second},
		{nil, []string{"duration=30s"}, 30 * time.Second},
		{env, []string{"duration=30s"}, 30 * time.Second},
		{env, []string{"duration=30s", "duration=40s"}, 40 * time.Second}, // later --set wins
	}
	for _, c := range cases {
		cfg, err := Load(LoadOptions{Path: p, Env: c.env, Sets: c.sets})
		if err != nil {
			t.Fatalf("env %v sets %v: %v", c.env, c.sets, err)
		}
		if cfg.Duration != c.want {
			t.Errorf("env %v sets %v: duration %v, want %v", c.env, c.sets, cfg.Duration, c.want)
		}
	}
}

func TestEnvOverrides(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.yaml", baseYAML)
	cfg, err := Load(LoadOptions{Path: p, Env: []string{
		"TRACEPIPE_INCREMENTAL_STATE__CLEAR_PERIOD=5s",
		"TRACEPIPE_PRODUCERS__SMB_SIZE_KB=1024",
		"TRACEPIPE_WRITE_INTO_FILE=true",
		"TRACEPIPE_BUFFERS__0__SIZE_KB=2048",
		// Appends, applied in index order whatever the environment's order
		// (10 after 2: numeric, not lexical).
		"TRACEPIPE_BUFFERS__2__SIZE_KB=8",
		"TRACEPIPE_BUFFERS__1__SIZE_KB=4",
		"TRACEPIPE_BUFFERS__3__SIZE_KB=12", "TRACEPIPE_BUFFERS__4__SIZE_KB=16", "TRACEPIPE_BUFFERS__5__SIZE_KB=20",
		"TRACEPIPE_BUFFERS__6__SIZE_KB=24", "TRACEPIPE_BUFFERS__7__SIZE_KB=28", "TRACEPIPE_BUFFERS__8__SIZE_KB=32",
		"TRACEPIPE_BUFFERS__9__SIZE_KB=36", "TRACEPIPE_BUFFERS__10__SIZE_KB=40",
		"TRACEPIPE_DATA_SOURCES__0__CONFIG__RATE=7",
		"TRACEPIPE_SINKS__0__MAX_FILE_SIZE=1MiB",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.IncrementalState.ClearPeriod != 5*time.Second || cfg.Producers.SMBSizeKB != 1024 || !cfg.WriteIntoFile {
		t.Errorf("env not applied: %+v %+v %v", cfg.IncrementalState, cfg.Producers, cfg.WriteIntoFile)
	}
	var sizes []uint32
	for _, b := range cfg.Buffers {
		sizes = append(sizes, b.SizeKB)
	}
	if want := []uint32{2048, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40}; !reflect.DeepEqual(sizes, want) {
		t.Errorf("buffer sizes %v, want %v", sizes, want)
	}
	if got := cfg.DataSources[0].Config["rate"]; got != 7 {
		t.Errorf("rate %#v", got)
	}
	if cfg.Sinks[0].MaxFileSize != 1<<20 {
		t.Errorf("sink max_file_size %d", cfg.Sinks[0].MaxFileSize)
	}
}

func TestSetValues(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.yaml", baseYAML)
	cfg, err := Load(LoadOptions{Path: p, Sets: []string{
		"write_into_file=true",
		"buffers[0].size_kb=12",
		"buffers[0].name=", // empty value: the empty string
		"data_sources[0].name=test.any",
		"data_sources[0].config.names=[a, b]",
		"data_sources[0].config.flag=true",
		"data_sources[0].config.n=12",
		"data_sources[0].config.s=10s",
		"data_sources[0].config.filter=a: b", // not a map: a string
		"data_sources[0].config.m={x: 1}",    // braces: a map
		"sinks[0].filter=packet.size > 10 && packet.kind == \"track_event\"",
		"max_file_size=2GB",
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"names": []any{"a", "b"}, "flag": true, "n": 12, "s": "10s", "filter": "a: b", "m": map[string]any{"x": 1}}
	if got := cfg.DataSources[0].Config; !reflect.DeepEqual(got, want) {
		t.Errorf("config %#v, want %#v", got, want)
	}
	if !cfg.WriteIntoFile || cfg.Buffers[0].SizeKB != 12 || cfg.Buffers[0].Name != "" || cfg.MaxFileSize != 2e9 {
		t.Errorf("sets not applied: %+v", cfg)
	}
	if cfg.Sinks[0].Filter != `packet.size > 10 && packet.kind == "track_event"` {
		t.Errorf("filter %q", cfg.Sinks[0].Filter)
	}
}

func TestSetAppend(t *testing.T) {
	// A streaming config without sinks.
	p := writeFile(t, t.TempDir(), "c.yaml", `
write_into_file: true
buffers: [{size_kb: 4}]
data_sources: [{name: test.any}]
`)
	cfg, err := Load(LoadOptions{Path: p, Sets: []string{
		"sinks[0].type=file", "sinks[0].path=/tmp/x.pftrace",
		"sinks[1].type=file", "sinks[1].path=/tmp/y.pftrace",
		"buffers[1].size_kb=8",
		"data_sources[1]={name: test.fake, config: {rate: 3}}",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Sinks) != 2 || cfg.Sinks[0].Path != "/tmp/x.pftrace" || cfg.Sinks[1].Path != "/tmp/y.pftrace" {
		t.Errorf("sinks %+v", cfg.Sinks)
	}
	if len(cfg.Buffers) != 2 || cfg.Buffers[1].SizeKB != 8 {
		t.Errorf("buffers %+v", cfg.Buffers)
	}
	if len(cfg.DataSources) != 2 || cfg.DataSources[1].Name != "test.fake" || cfg.DataSources[1].Config["rate"] != 3 {
		t.Errorf("data sources %+v", cfg.DataSources)
	}
}

func TestSetErrors(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.yaml", baseYAML)
	cases := []struct {
		sets []string
		env  []string
		want string
	}{
		{[]string{"sinks[2].type=file"}, nil,
			"--set sinks[2].type=file: index 2 is out of range: sinks has 1 elements (index 1 appends one)"},
		{[]string{"duration"}, nil, `--set "duration": want key=value`},
		{[]string{"=1"}, nil, "--set =1: empty key"},
		{[]string{"buffers[x].size_kb=1"}, nil, `--set buffers[x].size_kb=1: bad key "buffers[x].size_kb": index "x" is not a non-negative integer`},
		{[]string{"buffers[-1].size_kb=1"}, nil, `--set buffers[-1].size_kb=1: bad key "buffers[-1].size_kb": index "-1" is not a non-negative integer`},
		{[]string{"buffers[0.size_kb=1"}, nil, `--set buffers[0.size_kb=1: bad key "buffers[0.size_kb": missing ]`},
		{[]string{"a..b=1"}, nil, `--set a..b=1: bad key "a..b": want dotted names with [i] indices, like buffers[0].size_kb`},
		{[]string{"buffers.0.size_kb=1"}, nil, "--set buffers.0.size_kb=1: buffers is a list; index it like buffers[0]"},
		{[]string{"duration.x=1"}, nil, `--set duration.x=1: duration is "10s", not a map`},
		{[]string{"duration[0]=1"}, nil, `--set duration[0]=1: duration is "10s", not a list`},
		{[]string{"sinks[3].type=file", "buffers[9].size_kb=4"}, nil,
			"--set sinks[3].type=file: index 3 is out of range: sinks has 1 elements (index 1 appends one)\n" +
				"--set buffers[9].size_kb=4: index 9 is out of range: buffers has 1 elements (index 1 appends one)"},
		{nil, []string{"TRACEPIPE_BUFFERS__5__SIZE_KB=4"},
			"TRACEPIPE_BUFFERS__5__SIZE_KB: index 5 is out of range: buffers has 1 elements (index 1 appends one)"},
		{nil, []string{"TRACEPIPE_BUFFERS____SIZE_KB=4"}, "TRACEPIPE_BUFFERS____SIZE_KB: empty key"},
	}
	for _, c := range cases {
		_, err := Load(LoadOptions{Path: p, Sets: c.sets, Env: c.env})
		if err == nil || err.Error() != c.want {
			t.Errorf("sets %q env %q:\n got %v\nwant %s", c.sets, c.env, err, c.want)
		}
	}
	// Creating a list where none was is fine (and then an unknown key).
	_, err := Load(LoadOptions{Path: p, Sets: []string{"producers.x[0]=1"}})
	if err == nil || err.Error() != "producers.x: unknown key" {
		t.Errorf("producers.x[0]=1: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	p := writeFile(t, t.TempDir(), "c.toml", `
max_file_size = 5000000
[[buffers]]
size_kb = 4
[[data_sources]]
name = "test.any"
[[sinks]]
type = "file"
path = "x"
[[sinks]]
type = "file"
path = "y"
max_file_size = 7000000
`)
	c, err := Load(LoadOptions{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	if c.Duration != 0 || c.WriteIntoFile || c.FlushPeriod != 0 || c.IncrementalState.ClearPeriod != 0 {
		t.Errorf("zero defaults changed: %+v", c)
	}
	if c.FileWritePeriod != 5*time.Second || c.FlushTimeout != 5*time.Second || c.StatsPeriod != 10*time.Second {
		t.Errorf("period defaults: %v %v %v", c.FileWritePeriod, c.FlushTimeout, c.StatsPeriod)
	}
	if c.Producers != (ProducersConfig{SMBSizeKB: 256, PluginSMBSizeKB: 4096, SMBPageSizeKB: 4}) {
		t.Errorf("producers %+v", c.Producers)
	}
	if c.Buffers[0].FillPolicy != "ring_buffer" || c.DataSources[0].BufferExhaustedPolicy != "drop" || c.DataSources[0].TargetBuffer != 0 {
		t.Errorf("policy defaults: %+v %+v", c.Buffers[0], c.DataSources[0])
	}
	if c.Sinks[0].MaxFileSize != 5000000 || c.Sinks[1].MaxFileSize != 7000000 {
		t.Errorf("sink max_file_size: %d %d", c.Sinks[0].MaxFileSize, c.Sinks[1].MaxFileSize)
	}
}

// Validate on a Config built in code: defaults, name resolution, no Load.
func TestValidateInCode(t *testing.T) {
	c := &Config{
		WriteIntoFile: true,
		Buffers:       []BufferConfig{{Name: "a", SizeKB: 4}, {Name: "b", SizeKB: 8, FillPolicy: "DISCARD"}},
		DataSources:   []DataSourceConfig{{Name: "test.fake", TargetBufferName: "b", Config: map[string]any{"rate": 5}}},
		Sinks:         []sinks.Config{{Type: "file", Path: "t.pftrace"}},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.DataSources[0].TargetBuffer != 1 || c.Buffers[1].FillPolicy != "discard" || c.FlushTimeout != DefaultFlushTimeout {
		t.Errorf("%+v", c)
	}
	c.DataSources[0].Config["rate"] = -1
	c.Buffers[0].SizeKB = 3
	err := c.Validate()
	want := "buffers[0].size_kb: must be a multiple of 4 and > 0\ndata_sources[0].config.rate: must be >= 0, got -1"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 2 || ve.Problems[1] != (Problem{"data_sources[0].config.rate", "must be >= 0, got -1"}) {
		t.Errorf("problems %#v", ve)
	}
}

func TestDumpRoundTrip(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "prog.yaml", progYAML)
	for name, content := range map[string]string{"a.yaml": goodYAML, "b.toml": goodTOML, "c.json": goodJSON, "d.yaml": baseYAML} {
		c, err := Load(LoadOptions{Path: writeFile(t, dir, name, content)})
		if err != nil {
			t.Fatal(err)
		}
		out := c.String()
		c2, err := Load(LoadOptions{Path: writeFile(t, dir, "dump-"+name+".yaml", out)})
		if err != nil {
			t.Fatalf("%s: reloading the dump: %v\n%s", name, err, out)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Errorf("%s: dump does not round-trip:\n%s\n%#v\n%#v", name, out, c, c2)
		}
		if out2 := c2.String(); out2 != out {
			t.Errorf("%s: second dump differs:\n%s\n---\n%s", name, out, out2)
		}
	}
	c, _ := Load(LoadOptions{Path: writeFile(t, dir, "e.yaml", baseYAML)})
	want := strings.ReplaceAll(`duration: 10s
buffers:
  - name: main
    size_kb: 1024
    fill_policy: ring_buffer
    transfer_on_clone: false
    clear_before_clone: false
data_sources:
  - name: test.fake
    target_buffer: 0
    target_buffer_name: ""
    buffer_exhausted_policy: drop
    plugin: ""
    on_start_error: continue
write_into_file: false
file_write_period: 5s
max_file_size: 0
flush_period: 0s
flush_timeout: 5s
stats_period: 10s
incremental_state:
  clear_period: 0s
producers:
  smb_size_kb: 256
  plugin_smb_size_kb: 4096
  smb_page_size_kb: 4
sinks:
  - type: file
    name: ""
    filter: ""
    filter_error: drop
    queue_capacity: 8
    when_full: block
    on_error: stop
    path: $DIR/out.pftrace
    compression: ""
    max_file_size: 0
    fsync_period: 5s
plugin_dir: ""
unique_session_name: ""
rotate_period: 0s
perfetto:
  enabled: false
  producer_socket: ""
  wait_for_producers: 0s
  max_connections: 0
  max_connections_per_uid: 0
  init_timeout: 0s
`, "$DIR", dir)
	if got := c.String(); got != want {
		t.Errorf("dump:\n%s\nwant:\n%s", got, want)
	}
}

func TestProtoVMCompiled(t *testing.T) {
	dir := t.TempDir()
	bin, err := protovm.Compile([]byte(progYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.bin"), bin, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.pb"), bin, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, prog := range []string{"p.bin", "p.pb", filepath.Join(dir, "p.bin")} {
		p := writeFile(t, dir, "c.yaml", baseYAML)
		c, err := Load(LoadOptions{Path: p, Sets: []string{"data_sources[0].protovm.program=" + prog, "data_sources[0].protovm.memory_limit_kb=64"}})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c.DataSources[0].ProtoVM.ProgramBytes, bin) {
			t.Errorf("%s: ProgramBytes %x, want %x", prog, c.DataSources[0].ProtoVM.ProgramBytes, bin)
		}
	}
}

func TestPlugin(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "plug", "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(dir, "plug"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, dir, "c.yaml", baseYAML)
	// The name is the plugin's: not looked up in the registry.
	c, err := Load(LoadOptions{Path: p, Sets: []string{"data_sources[0].name=acme.gpu", "data_sources[0].plugin=plug"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.DataSources[0].Plugin != filepath.Join(dir, "plug") {
		t.Errorf("plugin resolved to %q", c.DataSources[0].Plugin)
	}
}

func TestParseByteSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "1048576": 1 << 20, "500KiB": 500 << 10, "64MiB": 64 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40,
		"1GB": 1e9, "500KB": 5e5, "3MB": 3e6, "1TB": 1e12, "12B": 12, "64 mib": 64 << 20, " 7 ": 7,
		"9223372036854775807": 1<<63 - 1, "8388607TiB": 8388607 << 40,
	}
	for s, want := range good {
		if got, err := ParseByteSize(s); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	bad := map[string]string{
		"":                    `size "": want an integer and a unit like "64MiB"`,
		"MiB":                 `size "MiB": want an integer and a unit like "64MiB"`,
		"-1":                  `size "-1": want an integer and a unit like "64MiB"`,
		"1.5GiB":              `size "1.5GiB": unknown unit ".5GiB" (want B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)`,
		"12XB":                `size "12XB": unknown unit "XB" (want B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)`,
		"8388608TiB":          `size "8388608TiB": too large`,
		"9223372036854775808": `size "9223372036854775808": too large`,
	}
	for s, want := range bad {
		if _, err := ParseByteSize(s); err == nil || err.Error() != want {
			t.Errorf("ParseByteSize(%q): %v, want %s", s, err, want)
		}
	}
}

func TestEditDistanceAndSuggest(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"abc", "abc", 0}, {"sizekb", "size_kb", 1}, {"kitten", "sitting", 3}, {"x", "", 1}, {"ab", "ba", 2}} {
		if got := names.EditDistance(c.a, c.b, 10); got != c.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	fields := fieldsOf(reflect.TypeFor[Config]())
	for key, want := range map[string]string{
		"Duration": " (did you mean duration?)", "buffer": " (did you mean buffers?)", "sink": " (did you mean sinks?)",
		"datasources": " (did you mean data_sources?)", "flush_period_ms": ` (did you mean flush_period? it takes a duration like "10s")`,
		"incremental_state_config": " (did you mean incremental_state?)", "zzz": "", "max_file_size_bytes": " (did you mean max_file_size?)",
	} {
		if got := suggest(key, fields); got != want {
			t.Errorf("suggest(%q) = %q, want %q", key, got, want)
		}
	}
}

// The producers rules agree with the service's: a (size, page) pair is
// valid iff smb.EnsureValidShmSizes keeps it unchanged.
func TestProducersMatchSMBRules(t *testing.T) {
	sizes := []uint32{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 100, 128, 256, 1000, 1024, 4096, 32764, 32768, 32769, 65536}
	for page := uint32(1); page <= 80; page++ {
		for _, size := range sizes {
			s, p := smb.EnsureValidShmSizes(size*1024, page*1024)
			abi := s == size*1024 && p == page*1024
			// The same rules for in-process and plugin data sources' SMBs
			// (the other size is the page itself, always valid with it).
			for _, pc := range []ProducersConfig{
				{SMBSizeKB: size, PluginSMBSizeKB: page, SMBPageSizeKB: page},
				{SMBSizeKB: page, PluginSMBSizeKB: size, SMBPageSizeKB: page},
			} {
				c := &Config{Producers: pc}
				k := &checker{}
				c.checkProducers(k)
				if abi != (len(k.problems) == 0) {
					t.Errorf("%+v: service keeps size %d KiB page %d KiB %v, config problems %v", pc, size, page, abi, k.problems)
				}
			}
		}
	}
}

// LoadOptions.Output (tracepipe run -o) points the first file sink at the
// given path, or adds a file sink to a config that has none.
func TestLoadOutput(t *testing.T) {
	dir := t.TempDir()
	noSinks := filepath.Join(dir, "nosinks.yaml")
	if err := os.WriteFile(noSinks, []byte("write_into_file: true\nbuffers: [{size_kb: 4}]\ndata_sources: [{name: test.any}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(LoadOptions{Path: noSinks}); err == nil || !strings.Contains(err.Error(), "sinks: at least one sink is required") {
		t.Fatalf("no sinks and no output: %v", err)
	}
	c, err := Load(LoadOptions{Path: noSinks, Output: "/tmp/x.pftrace"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sinks) != 1 || c.Sinks[0].Type != "file" || c.Sinks[0].Path != "/tmp/x.pftrace" {
		t.Fatalf("sinks %+v", c.Sinks)
	}
	c, err = Load(LoadOptions{Sets: []string{"sinks[0].path=a.pftrace", "sinks[1].type=file", "sinks[1].path=b.pftrace"}, Output: "o.pftrace"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sinks) != 2 || c.Sinks[0].Path != "o.pftrace" || c.Sinks[1].Path != "b.pftrace" {
		t.Fatalf("sinks %+v", c.Sinks)
	}
}
