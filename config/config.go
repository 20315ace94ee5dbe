package config

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tracepipe/tracepipe/sinks"
)

// Config is one tracing session's configuration (names mirror Perfetto's TraceConfig).
//
// A Config comes from Load (a YAML, TOML or JSON file, then TRACEPIPE_*
// environment overrides, then --set overrides), which applies the defaults
// below and validates it. Defaults (SetDefaults), applied to zero values
// before validation:
//
//	file_write_period              5s   (DefaultFileWritePeriod)
//	flush_period                   file_write_period when write_into_file
//	flush_timeout                  5s   (DefaultFlushTimeout)
//	stats_period                   10s  (DefaultStatsPeriod)
//	buffers[i].fill_policy         ring_buffer
//	data_sources[i].buffer_exhausted_policy  drop
//	producers.smb_size_kb          256  (Perfetto's kDefaultShmSize)
//	producers.plugin_smb_size_kb   the larger of smb_size_kb and 4096 (see ProducersConfig)
//	producers.smb_page_size_kb     4    (Perfetto's kDefaultShmPageSize)
//	sinks[i].max_file_size         max_file_size, for file sinks that set none
//
// Durations are Go duration strings ("10s", "1m30s", "500ms"); a bare number
// is an error. Sizes named *_kb are integers (KiB); max_file_size (top level
// and per sink) is a byte count or a string with a unit, see ParseByteSize.
type Config struct {
	Duration         time.Duration          `koanf:"duration"`          // 0: until stopped (signal)
	Buffers          []BufferConfig         `koanf:"buffers"`           // at least 1, at most 128
	DataSources      []DataSourceConfig     `koanf:"data_sources"`      // at least 1
	WriteIntoFile    bool                   `koanf:"write_into_file"`   // streaming: read back every file_write_period; else only at stop
	FileWritePeriod  time.Duration          `koanf:"file_write_period"` // default 5s; < 100ms is an error
	MaxFileSize      int64                  `koanf:"max_file_size"`     // bytes; default for file sinks that set none; 0 = unlimited
	FlushPeriod      time.Duration          `koanf:"flush_period"`      // 0 = no periodic flush (streaming: defaults to file_write_period)
	FlushTimeout     time.Duration          `koanf:"flush_timeout"`     // default 5s
	StatsPeriod      time.Duration          `koanf:"stats_period"`      // TraceStats packet period in streaming mode; default 10s
	IncrementalState IncrementalStateConfig `koanf:"incremental_state"`
	Producers        ProducersConfig        `koanf:"producers"`
	Sinks            []sinks.Config         `koanf:"sinks"`
	PluginDir        string                 `koanf:"plugin_dir"` // directory of data-source plugins: data_sources[i].name alone finds the plugin serving it
	// Flight recording (triggers.go here; pipeline/triggers.go, pipeline/snapshot.go, control/).
	TriggerConfig     *TriggerConfig `koanf:"trigger_config"`      // nil: no triggers
	UniqueSessionName string         `koanf:"unique_session_name"` // names the session; a second session with the name is refused
	RotatePeriod      time.Duration  `koanf:"rotate_period"`       // rotate the file sinks' files this often (beside max_file_size); 0 = never
	Perfetto          PerfettoConfig `koanf:"perfetto"`            // Perfetto producers on Perfetto's socket (config_perfetto.go)

	// baseDir is the directory relative paths (data_sources[i].plugin,
	// data_sources[i].protovm.program) are resolved against: the config
	// file's directory, or "" (the current directory).
	baseDir string
	// envs are the TRACEPIPE_ overrides Load applied, so that problems
	// found later (a plugin's check of its config) name their variable.
	envs []override
	// fromText: a Perfetto text config's (FromPerfettoText).
	fromText bool
	// perfettoActivateTriggers is a Perfetto TraceConfig's
	// activate_triggers (ConfigFromTraceConfig): accepted and not acted
	// on, as traced does; warnings says so.
	perfettoActivateTriggers []string
}

// BufferConfig is one trace buffer (Perfetto's TraceConfig.BufferConfig).
type BufferConfig struct {
	Name       string `koanf:"name"`        // optional; unique; referenced by data_sources[i].target_buffer_name
	SizeKB     uint32 `koanf:"size_kb"`     // a multiple of 4, > 0, < 4 GiB (≤ 4194303)
	FillPolicy string `koanf:"fill_policy"` // "ring_buffer" (default when empty) | "discard"
	// Snapshots (pipeline/snapshot.go): transfer_on_clone moves the buffer into
	// the snapshot and leaves an empty one behind (no copy);
	// clear_before_clone (with transfer_on_clone) empties it before the
	// snapshot's flush, so the snapshot holds only what that flush wrote.
	TransferOnClone  bool `koanf:"transfer_on_clone"`
	ClearBeforeClone bool `koanf:"clear_before_clone"`
}

// DataSourceConfig is one data source of the session (Perfetto's
// TraceConfig.DataSource + DataSourceConfig).
type DataSourceConfig struct {
	Name                  string         `koanf:"name"`                    // registered data source (plugins.Lookup)
	TargetBuffer          int            `koanf:"target_buffer"`           // index into buffers (default 0); Validate sets it from target_buffer_name
	TargetBufferName      string         `koanf:"target_buffer_name"`      // or by buffers[].name (wins when set)
	BufferExhaustedPolicy string         `koanf:"buffer_exhausted_policy"` // "drop" (default) | "stall"
	Config                map[string]any `koanf:"config"`                  // per-source section, validated by the source's factory (built-in and plugin sources only)
	PerfettoConfig        map[string]any `koanf:"perfetto_config"`         // Perfetto producers only: their DataSourceConfig's data-source configs (config_perfetto_yaml.go)
	Plugin                string         `koanf:"plugin"`                  // path of an out-of-process plugin binary (optional); Validate resolves it against the config file's directory
	ProtoVM               *ProtoVMConfig `koanf:"protovm"`
	Restart               *RestartConfig `koanf:"restart"`        // plugins: relaunch after a crash (nil: never)
	Limits                *PluginLimits  `koanf:"limits"`         // plugins: memory, CPU and stderr bounds of the plugin's processes (plugin_limits.go; nil: stderr defaults only)
	OnStartError          string         `koanf:"on_start_error"` // "continue" (default, also "") | "abort": what a failed Start does to the session

	// EncodedPerfettoConfig is the serialized DataSourceConfig passed on to
	// Perfetto producers with its data-source specific fields: the one a
	// Perfetto consumer sent (ConfigFromTraceConfig), or PerfettoConfig
	// encoded by Validate.
	EncodedPerfettoConfig []byte
	// PerfettoProducers is its producer_name_filter and
	// producer_name_regex_filter: the Perfetto producers that may serve
	// it (empty: any).
	PerfettoProducers ProducerFilter
}

// RestartConfig relaunches a plugin that died while recording, on a fresh
// SMB (what it committed before is kept), at most Max times, Backoff after
// each death.
type RestartConfig struct {
	Max     int           `koanf:"max"`
	Backoff time.Duration `koanf:"backoff"`
}

// ProtoVMConfig attaches a ProtoVM program to a data source: packets of the
// source overwritten in a ring buffer are folded into its incremental state.
type ProtoVMConfig struct {
	Program       string `koanf:"program"`         // .bin/.pb = compiled VmProgram bytes; .yaml/.yml = program description compiled with protovm.Compile(src, nil)
	MemoryLimitKB uint32 `koanf:"memory_limit_kb"` // required, > 0
	// Path is what the program serves: "restore" (tracepipe folds each
	// sequence and writes a restore packet ahead of its first packet after
	// a loss; no protovms packet) or "perfetto" (one VM per program, its
	// state written as a protovms packet for trace_processor, which
	// replaces every packet the program returns Ok for by the state).
	// Empty: what a YAML program declares with `serves:`, else "restore".
	Path         string `koanf:"path"`
	ProgramBytes []byte `koanf:"-"` // filled by Load/Validate: the compiled VmProgram
}

// ProtoVMConfig.Path values.
const (
	ProtoVMPathRestore  = "restore"
	ProtoVMPathPerfetto = "perfetto"
)

// IncrementalStateConfig is Perfetto's IncrementalStateConfig.
type IncrementalStateConfig struct {
	ClearPeriod time.Duration `koanf:"clear_period"` // 0 = never; else ≥ 100ms
}

// ProducersConfig sizes the shared memory buffer (SMB) of every producer,
// following the service's rules (smb-abi.md §1.1, smb.EnsureValidShmSizes).
//
// A plugin gets its own, larger default: its commits cross a process
// boundary (a gRPC message each, tens of microseconds of CPU on both
// sides, where an in-process commit is a channel send), and a writer that
// waits for chunks sleeps about a millisecond in a plugin process. With
// 256 KiB an unthrottled plugin writing 1 KiB packets reached about
// 0.55 GB/s on the 2-core test machine, with 4 MiB about 1.3 GB/s
// (BenchmarkPluginVsInProcess, medians of 8 runs each); the in-process
// source runs about a tenth slower with 256 KiB than with 4 MiB.
type ProducersConfig struct {
	SMBSizeKB       uint32 `koanf:"smb_size_kb"`        // in-process data sources; default 256 (Perfetto's default SMB size); a multiple of the page size, ≤ 32768
	PluginSMBSizeKB uint32 `koanf:"plugin_smb_size_kb"` // plugin data sources; default the larger of smb_size_kb and 4096 (a config that raised smb_size_kb for its plugins keeps it); same rules
	SMBPageSizeKB   uint32 `koanf:"smb_page_size_kb"`   // default 4; 4, 8, 16 or 32
}

// LoadOptions says where Load takes a configuration from.
type LoadOptions struct {
	Path string   // config file; "" = the embedded default (configs.Files, configs.Default)
	Sets []string // "key=value" overrides, e.g. "duration=30s", "buffers[1].size_kb=2048", "sinks[0].path=/tmp/x.pftrace"
	Env  []string // environment in os.Environ() form; only TRACEPIPE_* entries are used (nil = none; the CLI passes os.Environ())
	// Output, if set, is the trace file path: it replaces the path of the
	// first file sink, or adds a file sink when there is none (the CLI's
	// -o). Applied after every override, before validation.
	Output string
	// Warn, if set, receives one line per TRACEPIPE_* variable that is not
	// config (its first part names no top-level key) and was ignored.
	Warn func(msg string)
}

// Values of the enumerated string fields.
const (
	FillPolicyRingBuffer = "ring_buffer" // buffers[i].fill_policy: overwrite the oldest chunks
	FillPolicyDiscard    = "discard"     // buffers[i].fill_policy: drop new chunks once full

	OnStartErrorContinue = "continue" // data_sources[i].on_start_error: record the failure, record the other sources
	OnStartErrorAbort    = "abort"    // data_sources[i].on_start_error: end the session
	BufferExhaustedDrop  = "drop"     // data_sources[i].buffer_exhausted_policy: drop packets when the SMB is full
	BufferExhaustedStall = "stall"    // data_sources[i].buffer_exhausted_policy: block the writer until chunks free up
)

// Defaults and limits (service.md §1, smb-abi.md §1.1).
const (
	DefaultFileWritePeriod = 5 * time.Second        // file_write_period
	DefaultFlushTimeout    = 5 * time.Second        // flush_timeout
	DefaultStatsPeriod     = 10 * time.Second       // stats_period
	DefaultSMBSizeKB       = 256                    // producers.smb_size_kb
	DefaultPluginSMBSizeKB = 4096                   // producers.plugin_smb_size_kb, unless smb_size_kb is larger
	DefaultSMBPageSizeKB   = 4                      // producers.smb_page_size_kb
	MinPeriod              = 100 * time.Millisecond // file_write_period, flush_period, clear_period
	MinStatsPeriod         = time.Second            // stats_period
	MaxFlushTimeout        = 5 * time.Minute        // flush_timeout
	MaxDuration            = 7 * 24 * time.Hour     // duration
	MaxBuffers             = 128                    // len(buffers)
	MaxDataSources         = 1024                   // len(data_sources): each runs a producer with its own SMB
	MaxSinks               = 64                     // len(sinks): each has its own lane and queue
	MaxBufferSizeKB        = 4194303                // buffers[i].size_kb (< 4 GiB)
	MaxSMBSizeKB           = 32768                  // producers.smb_size_kb (32 MiB, kMaxShmSize)
	MaxSMBPageSizeKB       = 32                     // producers.smb_page_size_kb (largest page the service accepts)
)

// SetDefaults fills the zero fields that have a default (see Config). It is
// idempotent; Load and Validate call it.
func (c *Config) SetDefaults() {
	if c.FileWritePeriod == 0 {
		c.FileWritePeriod = DefaultFileWritePeriod
	}
	if c.WriteIntoFile && c.FlushPeriod == 0 && c.FileWritePeriod >= MinPeriod {
		// Streaming needs flushes: what writers hold in partial chunks
		// would otherwise reach the file only at stop, and
		// trace_processor flags a write_into_file trace without
		// flush_period (config_write_into_file_no_flush).
		c.FlushPeriod = c.FileWritePeriod
	}
	if c.FlushTimeout == 0 {
		c.FlushTimeout = DefaultFlushTimeout
	}
	if c.StatsPeriod == 0 {
		c.StatsPeriod = DefaultStatsPeriod
	}
	if c.Producers.SMBSizeKB == 0 {
		c.Producers.SMBSizeKB = DefaultSMBSizeKB
	}
	if c.Producers.SMBPageSizeKB == 0 {
		c.Producers.SMBPageSizeKB = DefaultSMBPageSizeKB
	}
	if c.Producers.PluginSMBSizeKB == 0 {
		// The larger of smb_size_kb and 4 MiB, so that a config that
		// raised smb_size_kb for its plugins keeps it; an invalid
		// smb_size_kb is not copied (it is reported under its own key).
		c.Producers.PluginSMBSizeKB = DefaultPluginSMBSizeKB
		if s, pg := c.Producers.SMBSizeKB, c.Producers.SMBPageSizeKB; s > DefaultPluginSMBSizeKB && s <= MaxSMBSizeKB && s%pg == 0 {
			c.Producers.PluginSMBSizeKB = s
		}
	}
	for i := range c.Buffers {
		b := &c.Buffers[i]
		b.FillPolicy = strings.ToLower(b.FillPolicy)
		if b.FillPolicy == "" {
			b.FillPolicy = FillPolicyRingBuffer
		}
	}
	for i := range c.DataSources {
		d := &c.DataSources[i]
		d.BufferExhaustedPolicy = strings.ToLower(d.BufferExhaustedPolicy)
		if d.BufferExhaustedPolicy == "" {
			d.BufferExhaustedPolicy = BufferExhaustedDrop
		}
		if d.OnStartError == "" {
			d.OnStartError = OnStartErrorContinue
		}
	}
	files := 0
	for i := range c.Sinks {
		if c.Sinks[i].Type == sinks.SinkTypeFile {
			files++
		}
	}
	for i := range c.Sinks {
		s := &c.Sinks[i]
		if s.Type != sinks.SinkTypeFile {
			continue
		}
		sec := s.Sections[sinks.SinkTypeFile]
		if s.MaxFileSize == 0 && sec["max_file_size"] == nil && c.MaxFileSize >= sinks.MinMaxFileSize {
			if sec != nil {
				sec["max_file_size"] = c.MaxFileSize
			} else {
				s.MaxFileSize = c.MaxFileSize
			}
		}
	}
	// Every sink key gets the value the sink will use (validate --print
	// shows them). The only file sink stops the session when it fails, so
	// that its file ends cleanly; with several, the others carry on.
	for i := range c.Sinks {
		c.Sinks[i].SetDefaults(files == 1)
	}
}

// Dump renders the configuration as YAML, every key present (the effective
// configuration after defaults), in the order of the struct fields. Loading
// the output again yields the same Config.
func (c *Config) Dump() ([]byte, error) {
	n, err := yamlNode(reflect.ValueOf(c).Elem())
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// String is Dump as a string (or the error Dump met).
func (c *Config) String() string {
	b, err := c.Dump()
	if err != nil {
		return fmt.Sprintf("pipeline: cannot render config: %v", err)
	}
	return string(b)
}

var durationType = reflect.TypeFor[time.Duration]()

// yamlNode builds the YAML node of v, following koanf tags.
func yamlNode(v reflect.Value) (*yaml.Node, error) {
	switch {
	case v.Type() == durationType:
		return scalarNode(time.Duration(v.Int()).String())
	case v.Kind() == reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		t := v.Type()
		defer dumpSections(v, n)
		for i := range t.NumField() {
			f := t.Field(i)
			key := f.Tag.Get("koanf")
			if key == "" || key == "-" || !f.IsExported() {
				continue
			}
			fv := v.Field(i)
			if (fv.Kind() == reflect.Pointer || fv.Kind() == reflect.Map) && fv.IsNil() {
				continue
			}
			vn, err := yamlNode(fv)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, vn)
		}
		return n, nil
	case v.Kind() == reflect.Pointer:
		return yamlNode(v.Elem())
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			en, err := yamlNode(v.Index(i))
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, en)
		}
		return n, nil
	default:
		return scalarNode(v.Interface())
	}
}

// dumpSections appends the sections a sink config holds beyond its
// fields (sinks[i].file, sinks[i].nats, ...).
func dumpSections(v reflect.Value, n *yaml.Node) {
	if !v.CanAddr() {
		return
	}
	sc, ok := v.Addr().Interface().(*sinks.Config)
	if !ok {
		return
	}
	if _, sec := sc.Sections[sinks.SinkTypeFile]; sec || sc.Type != sinks.SinkTypeFile {
		// The flat file keys mean nothing here unless set (then
		// validation reports them): leave the unset ones out.
		unset := map[string]bool{"path": sc.Path == "", "compression": sc.Compression == "",
			"max_file_size": sc.MaxFileSize == 0, "fsync_period": sc.FsyncPeriod == 0}
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			if !unset[n.Content[i].Value] {
				kept = append(kept, n.Content[i], n.Content[i+1])
			}
		}
		n.Content = kept
	}
	for _, k := range sc.SectionKeys() {
		vn := &yaml.Node{}
		if vn.Encode(sc.Sections[k]) == nil {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, vn)
		}
	}
}

func scalarNode(v any) (*yaml.Node, error) {
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return n, nil
}

const (
	// maxNameLen bounds a data source's name (every log line and status
	// row repeats it; Perfetto's names are a few dozen bytes).
	maxNameLen = 1024
	// MaxRegexLen bounds a producer name regex: compiling a 4 MB one took
	// 6 s, and a real one is a few dozen bytes.
	MaxRegexLen = 4096
)
