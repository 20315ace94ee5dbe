package config

import (
	"github.com/tracepipe/tracepipe/sinks"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/protovm"
)

// A minimal valid config the bad cases start from (with --set) or copy.
const okYAML = `
buffers:
  - {name: main, size_kb: 1024}
data_sources:
  - name: test.fake
sinks:
  - {type: file, path: out.pftrace}
`

func buffersYAML(n int) string {
	var b strings.Builder
	b.WriteString("data_sources: [{name: test.any}]\nsinks: [{type: file, path: x}]\nbuffers:\n")
	for range n {
		b.WriteString("  - size_kb: 4\n")
	}
	return b.String()
}

// TestBadConfigs checks the exact message of every kind of problem. In the
// wanted text, $DIR is the directory of the config file.
func TestBadConfigs(t *testing.T) {
	cases := []struct {
		name    string
		file    string // config file name (extension picks the parser)
		content string
		sets    []string
		env     []string
		files   map[string]string // extra files next to the config
		want    string
		valErr  bool // want a *ValidationError (else a plain error)
	}{
		// Unknown keys, with and without suggestions, at every level.
		{name: "top-level typo", content: okYAML + "durration: 10s\n",
			want: "durration: unknown key (did you mean duration?)", valErr: true},
		{name: "buffer key typo plus the missing size it causes", content: okYAML,
			sets: []string{"buffers[1].sizekb=2048"},
			want: "buffers[1].sizekb: unknown key (did you mean size_kb?)\nbuffers[1].size_kb: must be a multiple of 4 and > 0", valErr: true},
		{name: "unknown key without suggestion", content: okYAML + "colour: red\n",
			want: "colour: unknown key", valErr: true},
		{name: "perfetto _ms name", content: okYAML + "duration_ms: 10000\n",
			want: `duration_ms: unknown key (did you mean duration? it takes a duration like "10s")`, valErr: true},
		{name: "nested unknown keys", content: okYAML + "producers: {smb_size: 8}\nincremental_state: {clear: 1s}\n",
			sets: []string{"data_sources[0].protovm.programm=x", "sinks[0].compresion=gzip", "data_sources[0].target=1"},
			want: "data_sources[0].protovm.programm: unknown key (did you mean program?)\n" +
				"data_sources[0].target: unknown key\n" +
				"incremental_state.clear: unknown key\n" +
				"producers.smb_size: unknown key\n" +
				"sinks[0].compresion: unknown key (did you mean compression?)\n" +
				"data_sources[0].protovm.memory_limit_kb: required, must be > 0\n" +
				"data_sources[0].protovm.program: required",
			valErr: true},
		{name: "literal dotted and empty keys", content: okYAML + "incremental_state.clear_period: 5s\n\"\": 1\nbuffers[0]: 2\n",
			want: `"": unknown key` + "\n" +
				`"buffers[0]": unknown key` + "\n" +
				`"incremental_state.clear_period": unknown key (keys are not split at dots: nest clear_period under incremental_state)`,
			valErr: true},
		{name: "perfetto producers name", content: okYAML + "producers: {shm_size_kb: 8}\n",
			want: "producers.shm_size_kb: unknown key (did you mean smb_size_kb?)", valErr: true},
		{name: "unknown key from the environment", content: okYAML, env: []string{"TRACEPIPE_PRODUCERS__SMB_SIZE_KBB=8"},
			want: "producers.smb_size_kbb: unknown key (did you mean smb_size_kb?) (set by TRACEPIPE_PRODUCERS__SMB_SIZE_KBB)", valErr: true},
		{name: "bad value from the environment", content: okYAML, env: []string{"TRACEPIPE_BUFFERS__0__SIZE_KB=abc"},
			want: `buffers[0].size_kb: want a non-negative integer, got "abc" (set by TRACEPIPE_BUFFERS__0__SIZE_KB)`, valErr: true},

		// Wrong types.
		{name: "size_kb not a number", content: okYAML, sets: []string{"buffers[0].size_kb=abc"},
			want: `buffers[0].size_kb: want a non-negative integer, got "abc"`, valErr: true},
		{name: "negative size_kb", content: okYAML, sets: []string{"buffers[0].size_kb=-4"},
			want: `buffers[0].size_kb: want a non-negative integer, got -4`, valErr: true},
		{name: "size_kb beyond uint32", content: okYAML, sets: []string{"buffers[0].size_kb=4294967296"},
			want: `buffers[0].size_kb: want an integer <= 4294967295, got 4294967296`, valErr: true},
		{name: "fractional JSON number", file: "c.json",
			content: `{"buffers": [{"size_kb": 1.5}], "data_sources": [{"name": "test.any"}], "sinks": [{"type": "file", "path": "t.pftrace"}]}`,
			want:    `buffers[0].size_kb: want a non-negative integer, got 1.5`, valErr: true},
		{name: "bare number for a duration", content: okYAML + "duration: 10\n",
			want: `duration: want a duration like "10s", got 10`, valErr: true},
		{name: "bare number for a duration (JSON)", file: "c.json",
			content: `{"duration": 10, "buffers": [{"size_kb": 4}], "data_sources": [{"name": "test.any"}], "sinks": [{"type": "file", "path": "t.pftrace"}]}`,
			want:    `duration: want a duration like "10s", got 10`, valErr: true},
		{name: "duration in words", content: okYAML + "flush_timeout: ten seconds\n",
			want: `flush_timeout: want a duration like "10s", got "ten seconds"`, valErr: true},
		{name: "sink duration as number", content: okYAML, sets: []string{"sinks[0].fsync_period=10"},
			want: `sinks[0].fsync_period: want a duration like "10s", got 10`, valErr: true},
		{name: "bool as yes", content: okYAML + "write_into_file: yes\n",
			want: `write_into_file: want true or false, got "yes"`, valErr: true},
		{name: "list as map", content: "buffers: {size_kb: 4}\ndata_sources: [{name: test.any}]\nsinks: [{type: file, path: t.pftrace}]\n",
			want: "buffers: want a list, got a map", valErr: true},
		{name: "config as scalar", content: okYAML, sets: []string{"data_sources[0].config=3"},
			want: "data_sources[0].config: want a map, got 3", valErr: true},
		{name: "struct as scalar", content: okYAML + "producers: 3\n",
			want: "producers: want a map of settings, got 3", valErr: true},
		{name: "list element as scalar", content: okYAML, sets: []string{"buffers[1]=big"},
			want: `buffers[1]: want a map of settings, got "big"`, valErr: true},
		{name: "name as number", content: okYAML, sets: []string{"data_sources[0].name=12"},
			want: "data_sources[0].name: want a string, got 12", valErr: true},
		{name: "target_buffer as string", content: okYAML, sets: []string{"data_sources[0].target_buffer=main"},
			want: `data_sources[0].target_buffer: want an integer, got "main"`, valErr: true},
		{name: "max_file_size bad unit", content: okYAML + "max_file_size: 12XB\n",
			want: `max_file_size: want a byte count or a size like "64MiB", got "12XB"`, valErr: true},
		{name: "sink max_file_size as bool", content: okYAML, sets: []string{"sinks[0].max_file_size=true"},
			want: `sinks[0].max_file_size: want a byte count or a size like "64MiB", got true`, valErr: true},

		// Buffers.
		{name: "no buffers", content: "buffers: []\ndata_sources: [{name: test.any}]\nsinks: [{type: file, path: t.pftrace}]\n",
			want: "buffers: at least one buffer is required", valErr: true},
		{name: "129 buffers", content: buffersYAML(129),
			want: "buffers: at most 128 buffers are allowed, got 129", valErr: true},
		{name: "size_kb zero and not a multiple of 4", content: okYAML,
			sets: []string{"buffers[0].size_kb=0", "buffers[1].size_kb=10"},
			want: "buffers[0].size_kb: must be a multiple of 4 and > 0\nbuffers[1].size_kb: must be a multiple of 4 and > 0", valErr: true},
		{name: "size_kb 4 GiB", content: okYAML, sets: []string{"buffers[0].size_kb=4194304"},
			want: "buffers[0].size_kb: must be < 4194304 (4 GiB), got 4194304", valErr: true},
		{name: "fill_policy", content: okYAML, sets: []string{"buffers[0].fill_policy=overwrite"},
			want: `buffers[0].fill_policy: must be ring_buffer or discard, got "overwrite"`, valErr: true},
		{name: "duplicate buffer names", content: okYAML,
			sets: []string{"buffers[1].name=main", "buffers[1].size_kb=4", "buffers[2].name=main", "buffers[2].size_kb=4"},
			want: "buffers[1].name: \"main\" is already the name of buffers[0]\nbuffers[2].name: \"main\" is already the name of buffers[0]", valErr: true},

		// Data sources.
		{name: "no data sources", content: "buffers: [{size_kb: 4}]\nsinks: [{type: file, path: t.pftrace}]\n",
			want: "data_sources: at least one data source is required", valErr: true},
		{name: "name missing", content: okYAML, sets: []string{"data_sources[1].target_buffer=0"},
			want: "data_sources[1].name: required", valErr: true},
		{name: "unknown data source", content: okYAML,
			sets: []string{"data_sources[1].name=test.any", "data_sources[2].name=linux.proc_stats"},
			// Every registered source, sorted (see TestRegisteredList).
			want: `data_sources[2].name: unknown data source "linux.proc_stats" (registered: ` +
				strings.Join(plugins.Names(), ", ") + ")", valErr: true},
		{name: "target_buffer out of range", content: okYAML,
			sets: []string{"data_sources[0].target_buffer=1", "data_sources[1].name=test.any", "data_sources[1].target_buffer=-1"},
			want: "data_sources[0].target_buffer: must be in 0..0 (there are 1 buffers), got 1\n" +
				"data_sources[1].target_buffer: must be in 0..0 (there are 1 buffers), got -1", valErr: true},
		{name: "target_buffer_name unknown", content: okYAML, sets: []string{"data_sources[0].target_buffer_name=mian"},
			want: `data_sources[0].target_buffer_name: no buffer is named "mian" (buffers: main)`, valErr: true},
		{name: "target_buffer_name with unnamed buffers", content: okYAML,
			sets: []string{"buffers[0].name=", "data_sources[0].target_buffer_name=main"},
			want: `data_sources[0].target_buffer_name: no buffer is named "main" (no buffer has a name)`, valErr: true},
		{name: "buffer_exhausted_policy", content: okYAML, sets: []string{"data_sources[0].buffer_exhausted_policy=stall_then_abort"},
			want: `data_sources[0].buffer_exhausted_policy: must be drop or stall, got "stall_then_abort"`, valErr: true},
		{name: "factory problems are prefixed", content: okYAML,
			sets: []string{"data_sources[0].config={rate: -1, colour: red, mode: c}"},
			want: "data_sources[0].config.colour: unknown key\n" +
				"data_sources[0].config.mode: must be a or b, got c\n" +
				"data_sources[0].config.rate: must be >= 0, got -1", valErr: true},
		{name: "factory panics", content: okYAML, sets: []string{"data_sources[0].name=test.panics"},
			want: "data_sources[0].config: the data source's factory panicked: boom", valErr: true},
		{name: "plugin missing", content: okYAML, sets: []string{"data_sources[0].plugin=bin/nope"},
			want: `data_sources[0].plugin: "$DIR/bin/nope" does not exist`, valErr: true},
		{name: "plugin not executable", content: okYAML, sets: []string{"data_sources[0].plugin=plug"},
			files: map[string]string{"plug": "#!/bin/sh\n"},
			want:  `data_sources[0].plugin: "$DIR/plug" is not executable (mode -rw-r--r--)`, valErr: true},
		{name: "plugin is a directory", content: okYAML, sets: []string{"data_sources[0].plugin=sub"},
			files: map[string]string{"sub/x": ""},
			want:  `data_sources[0].plugin: "$DIR/sub" is a directory, not an executable`, valErr: true},

		// ProtoVM.
		{name: "protovm program missing", content: okYAML,
			sets: []string{"data_sources[0].protovm.program=prog.bin", "data_sources[0].protovm.memory_limit_kb=64"},
			want: `data_sources[0].protovm.program: "$DIR/prog.bin" does not exist`, valErr: true},
		{name: "protovm wrong extension", content: okYAML,
			sets: []string{"data_sources[0].protovm.program=prog.txt", "data_sources[0].protovm.memory_limit_kb=64"},
			want: `data_sources[0].protovm.program: "$DIR/prog.txt": want a compiled VmProgram (.bin, .pb) or a program description (.yaml, .yml)`, valErr: true},
		{name: "protovm program does not compile", content: okYAML,
			sets:  []string{"data_sources[0].protovm.program=prog.yaml", "data_sources[0].protovm.memory_limit_kb=64"},
			files: map[string]string{"prog.yaml": "commands:\n  - frobnicate: {}\n"},
			want:  `data_sources[0].protovm.program: "$DIR/prog.yaml": ` + compileErr("commands:\n  - frobnicate: {}\n"), valErr: true},
		{name: "protovm bytes do not parse", content: okYAML,
			sets:  []string{"data_sources[0].protovm.program=prog.bin", "data_sources[0].protovm.memory_limit_kb=64"},
			files: map[string]string{"prog.bin": "\x0a\xff"},
			want:  `data_sources[0].protovm.program: "$DIR/prog.bin": ` + parseErr("\x0a\xff"), valErr: true},
		{name: "protovm no memory limit", content: okYAML,
			sets:  []string{"data_sources[0].protovm.program=prog.yaml"},
			files: map[string]string{"prog.yaml": progYAML},
			want:  "data_sources[0].protovm.memory_limit_kb: required, must be > 0", valErr: true},
		{name: "protovm perfetto path with a program that folds events", content: okYAML,
			sets:  []string{"data_sources[0].protovm.program=prog.yaml", "data_sources[0].protovm.memory_limit_kb=64", "data_sources[0].protovm.path=perfetto"},
			files: map[string]string{"prog.yaml": foldsEventsYAML},
			want: `data_sources[0].protovm.path: perfetto: program "$DIR/prog.yaml": returns Ok for a track_event slice with interned_data (SDK style) packet; ` +
				`trace_processor replaces every packet whose patch is Ok by the VM state, so such events would vanish from the imported trace. ` +
				`A program for this path must fail (Error) on every packet that carries a payload and accept only pure patch packets; use path: restore for a program that folds event packets`,
			valErr: true},
		{name: "protovm perfetto path with a program declaring restore", content: okYAML,
			sets:  []string{"data_sources[0].protovm.program=prog.yaml", "data_sources[0].protovm.memory_limit_kb=64", "data_sources[0].protovm.path=perfetto"},
			files: map[string]string{"prog.yaml": "serves: restore\n" + foldsEventsYAML},
			want:  `data_sources[0].protovm.path: perfetto, but program "$DIR/prog.yaml" declares serves: restore`, valErr: true},
		{name: "protovm unknown path", content: okYAML,
			sets:  []string{"data_sources[0].protovm.program=prog.yaml", "data_sources[0].protovm.memory_limit_kb=64", "data_sources[0].protovm.path=both"},
			files: map[string]string{"prog.yaml": progYAML},
			want:  `data_sources[0].protovm.path: "both": want restore or perfetto`, valErr: true},
		{name: "protovm program serves nothing known", content: okYAML,
			sets:  []string{"data_sources[0].protovm.program=prog.yaml", "data_sources[0].protovm.memory_limit_kb=64"},
			files: map[string]string{"prog.yaml": "serves: tp\n" + progYAML},
			want:  `data_sources[0].protovm.program: "$DIR/prog.yaml": protovm compile: serves: "tp": want restore or perfetto`, valErr: true},

		// Durations and periods.
		{name: "negative duration", content: okYAML + "duration: -1s\n",
			want: "duration: must be >= 0 and <= 7 days (168h), got -1s", valErr: true},
		{name: "duration over 7 days", content: okYAML + "duration: 169h\n",
			want: "duration: must be >= 0 and <= 7 days (168h), got 169h0m0s", valErr: true},
		{name: "file_write_period too short", content: okYAML + "write_into_file: true\nfile_write_period: 50ms\n",
			want: "file_write_period: must be >= 100ms when write_into_file is true, got 50ms", valErr: true},
		{name: "file_write_period ignored without write_into_file", content: okYAML + "file_write_period: 50ms\nflush_period: 99ms\n",
			want: "flush_period: must be 0 (no periodic flush) or >= 100ms, got 99ms", valErr: true},
		{name: "flush_timeout", content: okYAML + "flush_timeout: 6m\nstats_period: 999ms\n",
			want: "flush_timeout: must be > 0 and <= 5m, got 6m0s\nstats_period: must be >= 1s, got 999ms", valErr: true},
		{name: "negative flush_timeout", content: okYAML + "flush_timeout: -1s\n",
			want: "flush_timeout: must be > 0 and <= 5m, got -1s", valErr: true},
		{name: "clear_period", content: okYAML + "incremental_state: {clear_period: 10ms}\n",
			want: "incremental_state.clear_period: must be 0 (never) or >= 100ms, got 10ms", valErr: true},
		{name: "negative max_file_size", content: okYAML + "max_file_size: -1\n",
			want: "max_file_size: must be >= 0 (0 = unlimited), got -1", valErr: true},

		// Producers (smb-abi §1.1).
		{name: "smb page 12", content: okYAML + "producers: {smb_page_size_kb: 12}\n",
			want: "producers.smb_page_size_kb: must be 4, 8, 16 or 32 (a power-of-two multiple of 4 KiB, at most the service's 32 KiB page; smb-abi §1.1), got 12", valErr: true},
		{name: "smb page 64 and size not a multiple", content: okYAML + "producers: {smb_page_size_kb: 64, smb_size_kb: 100}\n",
			want: "producers.smb_page_size_kb: must be 4, 8, 16 or 32 (a power-of-two multiple of 4 KiB, at most the service's 32 KiB page; smb-abi §1.1), got 64", valErr: true},
		{name: "smb size not a multiple of the page", content: okYAML + "producers: {smb_page_size_kb: 32, smb_size_kb: 48}\n",
			want: "producers.smb_size_kb: must be a multiple of smb_page_size_kb (32) (smb-abi §1.1), got 48", valErr: true},
		{name: "plugin smb size not a multiple of the page", content: okYAML + "producers: {smb_page_size_kb: 8, plugin_smb_size_kb: 1028}\n",
			want: "producers.plugin_smb_size_kb: must be a multiple of smb_page_size_kb (8) (smb-abi §1.1), got 1028", valErr: true},
		{name: "smb size not a multiple, plugin size derived from it", content: okYAML + "producers: {smb_page_size_kb: 8, smb_size_kb: 8196}\n",
			want: "producers.smb_size_kb: must be a multiple of smb_page_size_kb (8) (smb-abi §1.1), got 8196", valErr: true},
		{name: "plugin smb size too big", content: okYAML + "producers: {plugin_smb_size_kb: 65536}\n",
			want: "producers.plugin_smb_size_kb: must be <= 32768 (32 MiB, the largest SMB the service creates; smb-abi §1.1), got 65536", valErr: true},
		{name: "smb too large", content: okYAML + "producers: {smb_size_kb: 65536}\n",
			want: "producers.smb_size_kb: must be <= 32768 (32 MiB, the largest SMB the service creates; smb-abi §1.1), got 65536", valErr: true},

		// Sinks.
		{name: "ring buffer without sinks", content: "buffers: [{size_kb: 4}]\ndata_sources: [{name: test.any}]\n",
			want: "sinks: at least one sink is required (or pass -o FILE to tracepipe run)", valErr: true},
		{name: "sink problems re-prefixed", content: okYAML,
			sets: []string{"sinks[1].type=pigeon", "sinks[2].type=file", "sinks[2].compression=lz4", "sinks[2].queue_capacity=-1"},
			want: "sinks[1].type: \"pigeon\" is not a sink type; registered: " + strings.Join(sinks.Types(), ", ") + "\n" +
				"sinks[2].queue_capacity: -1 is negative; want 0 (the default, 8) or a batch count\n" +
				"sinks[2].path: required for a file sink\n" +
				"sinks[2].compression: \"lz4\" is not supported; want \"none\", \"gzip\" or \"zstd\"", valErr: true},
		{name: "sink section problems", content: okYAML,
			sets: []string{"sinks[1].type=file", "sinks[1].file.max_file_size=7", "sinks[1].file.nope=1", "sinks[1].when_full=later"},
			want: "sinks[1].when_full: \"later\" is not block or drop\n" +
				"sinks[1].file.path: required for a file sink\n" +
				"sinks[1].file.max_file_size: 7 is below the minimum 1MiB (0 = unlimited)\n" +
				"sinks[1].file.nope: unknown key", valErr: true},
		{name: "sink flat and section key", content: okYAML,
			sets: []string{"sinks[0].file.path=b.pftrace"},
			want: "sinks[0].path: set both here and as file.path; keep one", valErr: true},
		{name: "sink compression mismatch", content: okYAML,
			sets: []string{"sinks[0].path=x.pftrace.gz", "sinks[0].compression=zstd"},
			want: "sinks[0].compression: \"zstd\", but the name \"x.pftrace.gz\" implies gzip", valErr: true},
		{name: "top-level max_file_size below 1MiB", content: okYAML + "max_file_size: 100\n",
			want: "max_file_size: must be 0 (unlimited) or >= 1MiB (bytes on disk per file), got 100", valErr: true},
		{name: "sink fsync_period", content: okYAML, sets: []string{"sinks[0].fsync_period=1ms"},
			want: "sinks[0].fsync_period: 1ms is below the minimum 100ms", valErr: true},
		{name: "duplicate sink paths", content: okYAML, sets: []string{"sinks[1].type=file", "sinks[1].path=./out.pftrace"},
			want: `sinks[1].path: "$DIR/out.pftrace" is already the path of sinks[0]`, valErr: true},

		// Many problems at once, in key order then rule order.
		{name: "multi-problem", content: `
duration: 10
buffers:
  - {size_kb: 3, fill_policy: fifo}
data_sources:
  - {name: test.fake, target_buffer: 3, config: {rate: -5}}
sinks: []
flush_period: 1ms
`,
			want: "duration: want a duration like \"10s\", got 10\n" +
				"flush_period: must be 0 (no periodic flush) or >= 100ms, got 1ms\n" +
				"buffers[0].size_kb: must be a multiple of 4 and > 0\n" +
				"buffers[0].fill_policy: must be ring_buffer or discard, got \"fifo\"\n" +
				"data_sources[0].target_buffer: must be in 0..0 (there are 1 buffers), got 3\n" +
				"data_sources[0].config.rate: must be >= 0, got -5\n" +
				"sinks: at least one sink is required (or pass -o FILE to tracepipe run)",
			valErr: true},

		// Files that do not parse.
		{name: "YAML syntax", content: "duration: 10s\nbuffers: []\nflush_period: a: b\n",
			want: "$DIR/c.yaml: yaml: line 3: mapping values are not allowed in this context"},
		{name: "YAML bad indentation", content: "duration: 10s\nbuffers:\n  - size_kb: 4\n   name: x\n",
			want: "$DIR/c.yaml: yaml: line 4: did not find expected '-' indicator"},
		{name: "YAML tab", content: "duration: 10s\n\tbuffers: []\n",
			want: "$DIR/c.yaml: yaml: line 2: found a tab character that violates indentation"},
		// yaml.v3 named the line before the one where the unclosed flow
		// sequence starts (its 0-based context mark); Load names the
		// line the problem is on.
		{name: "YAML unclosed flow", content: "duration: 10s\nbuffers: [{size_kb: 4}\nsinks: []\n",
			want: "$DIR/c.yaml: yaml: line 2: did not find expected ',' or ']'"},
		{name: "YAML top level not a map", content: "- a\n- b\n",
			want: "$DIR/c.yaml: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[string]interface {}"},
		{name: "TOML syntax", file: "c.toml", content: "duration = \"10s\"\n[buffers\n",
			want: "$DIR/c.toml: toml: expected ']' to close table name"},
		{name: "JSON syntax", file: "c.json", content: `{"duration": "10s",}`,
			want: "$DIR/c.json: invalid character '}' looking for beginning of object key string"},
		// go-toml stops at 10000 levels of its own; 5000 reach the config's
		// limit first.
		{name: "nested too deeply (deeper than 64, within TOML's own 10000)", file: "c.toml",
			content: "[[data_sources]]\nname = \"test.any\"\nconfig = { a = " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + " }\n",
			want:    "$DIR/c.toml: values nest deeper than 64 levels"},
		{name: "nested just deep enough", content: okYAML,
			sets: []string{"data_sources[0].name=test.any", "data_sources[0].config.a=" + strings.Repeat("[", 60) + strings.Repeat("]", 60), "duration=-1s"},
			want: "duration: must be >= 0 and <= 7 days (168h), got -1s", valErr: true},
		{name: "override nested too deeply", content: okYAML,
			sets: []string{"data_sources[0].config.a=" + strings.Repeat("[", 61) + strings.Repeat("]", 61)},
			want: "overrides: values nest deeper than 64 levels"},
		{name: "empty file", content: "",
			want: "$DIR/c.yaml: the file holds no settings"},
		{name: "comments only", content: "# nothing\n",
			want: "$DIR/c.yaml: the file holds no settings"},
		{name: "empty JSON object", file: "c.json", content: "{}",
			want: "$DIR/c.json: the file holds no settings"},
		{name: "unknown extension", file: "c.ini", content: okYAML,
			want: `config $DIR/c.ini: unknown extension ".ini"; want .yaml, .yml, .toml or .json`},
		{name: "no extension", file: "config", content: okYAML,
			want: `config $DIR/config: no file extension; want .yaml, .yml, .toml or .json`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range c.files {
				writeFile(t, dir, name, content)
			}
			file := c.file
			if file == "" {
				file = "c.yaml"
			}
			p := writeFile(t, dir, file, c.content)
			cfg, err := Load(LoadOptions{Path: p, Sets: c.sets, Env: c.env})
			want := strings.ReplaceAll(c.want, "$DIR", dir)
			if err == nil {
				t.Fatalf("loaded %v\nwant error %s", cfg, want)
			}
			if err.Error() != want {
				t.Errorf("got:\n%s\nwant:\n%s", err, want)
			}
			var ve *ValidationError
			if errors.As(err, &ve) != c.valErr {
				t.Errorf("error is %T; want a *ValidationError: %v", err, c.valErr)
			}
			if cfg != nil {
				t.Errorf("config returned with an error")
			}
		})
	}
	if len(cases) < 25 {
		t.Fatalf("only %d cases", len(cases))
	}
}

// foldsEventsYAML folds interned event names from any packet that has
// them, event packets included (configs/protovm/interned_names.yaml).
const foldsEventsYAML = `commands:
  - merge: {src: [12, "2[]"], dst: [12, 2], key_field: 1}
`

func compileErr(src string) string {
	_, err := protovm.Compile([]byte(src), nil)
	if err == nil {
		panic("program compiles")
	}
	return err.Error()
}

func parseErr(b string) string {
	_, err := protovm.ParseProgram([]byte(b))
	if err == nil {
		panic("program parses")
	}
	return err.Error()
}

func TestUnreadableConfig(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(LoadOptions{Path: filepath.Join(dir, "missing.yaml")})
	if err == nil || !os.IsNotExist(errors.Unwrap(err)) {
		t.Errorf("missing file: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Load(LoadOptions{Path: filepath.Join(dir, "d.yaml")})
	if want := fmt.Sprintf("config: %s is not a regular file", filepath.Join(dir, "d.yaml")); err == nil || err.Error() != want {
		t.Errorf("directory: %v, want %s", err, want)
	}
}

// The list an unknown data source's message shows is sorted and holds the
// sources this test binary registers: the builtin ones
// (config_examples_test.go) and the fakes (config_test.go). Other test
// files of the package may register more.
func TestRegisteredList(t *testing.T) {
	names := plugins.Names()
	if !sort.StringsAreSorted(names) {
		t.Errorf("not sorted: %v", names)
	}
	for _, want := range []string{"linux.process_stats", "linux.sys_stats", "tracepipe.synthetic", "test.any", "test.fake", "test.panics"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s not in %v", want, names)
		}
	}
}

// A config file over 4 MiB is refused by its size before it is parsed
// (the YAML loader holds about 100 times a file's size), naming the file.
func TestConfigFileSizeBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	big := "buffers: [{size_kb: 4096}]\n# " + strings.Repeat("x", 4<<20) + "\n"
	if err := os.WriteFile(path, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(LoadOptions{Path: path})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("Load of a %d-byte config: %v; want it refused as too large, naming the file", len(big), err)
	}
}

// More data sources or sinks than a session may run are one problem each,
// not one per entry.
func TestConfigCountBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("buffers: [{size_kb: 4096}]\ndata_sources:\n")
	for range MaxDataSources + 1 {
		b.WriteString("  - {name: tracepipe.synthetic}\n")
	}
	b.WriteString("sinks:\n")
	for i := range MaxSinks + 1 {
		fmt.Fprintf(&b, "  - {type: file, path: /tmp/t%d.pftrace}\n", i)
	}
	path := filepath.Join(t.TempDir(), "many.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(LoadOptions{Path: path})
	if err == nil {
		t.Fatal("a config of 1025 data sources and 65 sinks loaded")
	}
	msg := err.Error()
	for _, want := range []string{"data_sources: at most 1024 data sources are allowed, got 1025", "sinks: at most 64 sinks are allowed, got 65"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "\n"); n > 5 {
		t.Errorf("%d lines of problems, want the two bounds alone:\n%.2000s", n+1, msg)
	}
}

// A data source's name and a trigger's producer_name_regex are bounded,
// each refused at its field.
func TestConfigNameAndRegexBounds(t *testing.T) {
	long := strings.Repeat("a", maxNameLen+1)
	re := strings.Repeat("a", MaxRegexLen+1)
	path := filepath.Join(t.TempDir(), "long.yaml")
	yaml := fmt.Sprintf("buffers: [{size_kb: 4096}]\ndata_sources: [{name: tracepipe.synthetic}, {name: %s}]\nsinks: [{type: file, path: /tmp/x.pftrace}]\ntrigger_config: {trigger_mode: stop_tracing, trigger_timeout: 10s, triggers: [{name: t, producer_name_regex: %s}]}\n", long, re)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(LoadOptions{Path: path})
	if err == nil {
		t.Fatal("a 1025-byte name and a 4097-byte regex loaded")
	}
	for _, want := range []string{"data_sources[1].name: 1025 bytes, at most 1024", "producer_name_regex: 4097 bytes, at most 4096"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%.1500s", want, err)
		}
	}
}
