package config

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// A text config is refused field by field: an unknown field with the
// file, line and column (prototext names it), a field tracepipe knows but
// does not support by its name and line (the consumer port's mapping), a
// data-source config the schema does not model with what to do instead.
func TestTraceConfigTextRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"unknown.pbtxt", "buffers {\n  size_kb: 1024\n  fill_polcy: DISCARD\n}\n",
			[]string{"unknown.pbtxt:3:3:", "fill_polcy"}},
		{"unknown_ds.pbtxt", "buffers { size_kb: 1024 }\ndata_sources {\n  config {\n    name: \"linux.sys_stats\"\n    sys_stats_config { meminfo_perid_ms: 5 }\n  }\n}\n",
			[]string{"unknown_ds.pbtxt:5:", "meminfo_perid_ms"}},
		{"bad_enum.pbtxt", "buffers { size_kb: 1024 }\ndata_sources {\n  config {\n    name: \"linux.sys_stats\"\n    sys_stats_config {\n      meminfo_counters: MEMINFO_NOPE\n    }\n  }\n}\n",
			[]string{"bad_enum.pbtxt:6:", "MEMINFO_NOPE"}},
		{"unsupported.pbtxt", "buffers { size_kb: 1024 }\nduration_ms: 1000\nlockdown_mode: LOCKDOWN_SET\n",
			[]string{"unsupported.pbtxt", "not supported by tracepipe: lockdown_mode (line 3)"}},
		{"unsupported2.pbtxt", "buffers { size_kb: 1024 }\nnotify_traceur: true\n",
			[]string{"not supported by tracepipe: notify_traceur (line 2)"}},
		{"machine.pbtxt", "buffers { size_kb: 1024 }\ndata_sources {\n  config { name: \"x\" }\n  machine_name_filter: \"m\"\n}\n",
			[]string{"data_sources[0].machine_name_filter (line 4)"}},
		{"opaque.cfg", "buffers { size_kb: 1024 }\ndata_sources {\n  config {\n    name: \"org.chromium.trace_event\"\n    chrome_config {\n      trace_config: \"{}\"\n    }\n  }\n}\n",
			[]string{"opaque.cfg:5:", "chrome_config is a data-source config tracepipe's schema does not model", "perfetto_config.chrome_config"}},
		// An enum given by a number the schema does not know: refused at
		// the line of that buffer's field, even mid-line.
		{"enum_number.pbtxt", "buffers { size_kb: 1024 }\nbuffers { size_kb: 1024 fill_policy: 77 }\ndata_sources { config { name: \"linux.sys_stats\" } }\n",
			[]string{"not supported by tracepipe: buffers[1].fill_policy 77 (line 2)"}},
		{"syntax.textproto", "buffers {\n  size_kb: 1024\n", []string{"syntax.textproto: unexpected end of the file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadTraceConfigText(path, TraceConfigTextOptions{Output: filepath.Join(dir, "x.pftrace")})
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// Not a regular file: refused before parsing, never a hang.
	if _, err := LoadTraceConfigText(dir, TraceConfigTextOptions{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}

// The extensions that select the text parser.
func TestIsTraceConfigText(t *testing.T) {
	var got []string
	for _, p := range []string{"a.pbtxt", "b.TEXTPROTO", "c.cfg", "d.yaml", "e.json", "f.toml", "g", "h.pb"} {
		if IsTraceConfigText(p) {
			got = append(got, p)
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "a.pbtxt b.TEXTPROTO c.cfg" {
		t.Fatalf("text configs: %v", got)
	}
}

// protobuf-go writes the space after "proto:" as a regular or a
// non-breaking one (chosen per binary); either way the position becomes
// file:line:column.
func TestTraceConfigTextErrorSpaces(t *testing.T) {
	data := []byte("a: 1\nb: 2\n")
	for _, sp := range []string{" ", "\u00a0"} {
		got := textError("x.pbtxt", data, errors.New("proto:"+sp+"(line 2:1):"+sp+"unknown field: b")).Error()
		if got != "x.pbtxt:2:1: unknown field: b" {
			t.Errorf("%q: got %q", sp, got)
		}
		got = textError("x.pbtxt", data, errors.New("proto:"+sp+"syntax error (line 1:3): unexpected token")).Error()
		if got != "x.pbtxt:1:3: syntax error: unexpected token" {
			t.Errorf("%q: got %q", sp, got)
		}
		got = textError("x.pbtxt", data, errors.New("proto:"+sp+"unexpected EOF")).Error()
		if !strings.HasPrefix(got, "x.pbtxt: unexpected end of the file") {
			t.Errorf("%q: got %q", sp, got)
		}
	}
}

// A consumer's DataSourceConfig whose modelled data-source config does not
// parse is refused where the session is created, naming the data source,
// not sent on to a producer.
func TestConfigFromTraceConfigRefusesMalformedSourceConfig(t *testing.T) {
	dsc := protowire.AppendTag(nil, 1, protowire.BytesType)
	dsc = protowire.AppendString(dsc, "linux.sys_stats")
	dsc = protowire.AppendTag(dsc, 104, protowire.BytesType)
	dsc = protowire.AppendBytes(dsc, []byte{0x08}) // meminfo_period_ms with no value
	ds := protowire.AppendTag(nil, 1, protowire.BytesType)
	ds = protowire.AppendBytes(ds, dsc)
	tc := protowire.AppendTag(nil, 1, protowire.BytesType)
	tc = protowire.AppendBytes(tc, []byte{0x08, 0x80, 0x08}) // buffers { size_kb: 1024 }
	tc = protowire.AppendTag(tc, 2, protowire.BytesType)
	tc = protowire.AppendBytes(tc, ds)
	_, err := ConfigFromTraceConfig(tc)
	if err == nil || !strings.Contains(err.Error(), "data_sources[0].config: the DataSourceConfig does not parse") {
		t.Fatalf("got %v", err)
	}
	// The same config well formed is accepted.
	dsc[len(dsc)-2], dsc = 2, append(dsc, 0x05)
	ds = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), dsc)
	tc = protowire.AppendBytes(protowire.AppendTag([]byte{0x0a, 0x03, 0x08, 0x80, 0x08}, 2, protowire.BytesType), ds)
	if _, err := ConfigFromTraceConfig(tc); err != nil {
		t.Fatalf("well formed: %v", err)
	}
}

// TRACEPIPE_* variables reach a text config as --set does: the perfetto.*
// ones apply, any other config variable is refused by name (run's help
// says the environment overrides the config: a variable silently ignored
// would leave the user believing it took effect).
func TestTraceConfigTextEnvironment(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.pbtxt")
	text := "buffers { size_kb: 1024 }\ndata_sources { config { name: \"linux.sys_stats\" } }\nduration_ms: 2000\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x.pftrace")
	cfg, err := LoadTraceConfigText(path, TraceConfigTextOptions{Output: out,
		Env: []string{"TRACEPIPE_PERFETTO__WAIT_FOR_PRODUCERS=250ms", "HOME=/root"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Perfetto.WaitForProducers; got != 250*time.Millisecond {
		t.Errorf("TRACEPIPE_PERFETTO__WAIT_FOR_PRODUCERS: wait_for_producers %v, want 250ms", got)
	}
	// --set comes after the environment.
	cfg, err = LoadTraceConfigText(path, TraceConfigTextOptions{Output: out,
		Env:  []string{"TRACEPIPE_PERFETTO__WAIT_FOR_PRODUCERS=250ms"},
		Sets: []string{"perfetto.wait_for_producers=1s"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Perfetto.WaitForProducers; got != time.Second {
		t.Errorf("--set after the environment: wait_for_producers %v, want 1s", got)
	}
	for _, v := range []string{"TRACEPIPE_DURATION=1s", "TRACEPIPE_BUFFERS__0__SIZE_KB=3"} {
		_, err := LoadTraceConfigText(path, TraceConfigTextOptions{Output: out, Env: []string{v}})
		name, _, _ := strings.Cut(v, "=")
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", v, err)
		}
	}
}

// A text config's range problems name the text config's own fields
// (duration_ms, not tracepipe's duration; data_sources[1].config.target_buffer)
// at file:line, the line of the element the index names.
func TestTraceConfigTextProblemsNameFieldAndLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.pbtxt")
	text := `# two buffers, the second too large
buffers { size_kb: 1024 }
buffers {
  size_kb: 4194304
}
data_sources { config { name: "linux.sys_stats" } }
data_sources {
  config {
    name: "linux.process_stats"
    target_buffer: 7
  }
}
duration_ms: 4294967295
write_into_file: true
max_file_size_bytes: 1
`
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadTraceConfigText(path, TraceConfigTextOptions{Output: filepath.Join(dir, "x.pftrace")})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a ValidationError, got %v", err)
	}
	for _, w := range []string{
		path + ":4: buffers[1].size_kb: ",
		path + ":10: data_sources[1].config.target_buffer: ",
		path + ":13: duration_ms: ",
		path + ":15: max_file_size_bytes: ",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("problems\n%v\ndo not say %q", err, w)
		}
	}
}
