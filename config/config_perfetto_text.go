package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/sinks"
)

// A Perfetto text config (what `perfetto --txt -c` reads) run directly by
// `tracepipe run -c trace.pbtxt`: parsed against tracepipe's schema of
// TraceConfig (perfettoipc/perfetto_config.proto), serialized, and mapped
// by ConfigFromTraceConfig, the very mapping the consumer port applies to
// EnableTracing. What one accepts the other accepts; what one refuses, by
// name, the other refuses.

// IsTraceConfigText reports whether path names a Perfetto text config by
// its extension: .pbtxt, .textproto or .cfg (Perfetto's own examples use
// all three).
func IsTraceConfigText(path string) bool {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".pbtxt", ".textproto", ".cfg":
		return true
	}
	return false
}

// TraceConfigTextOptions are what `tracepipe run` changes in a text config.
type TraceConfigTextOptions struct {
	// Output is the trace file (default: DefaultTextConfigOutput, relative
	// to the working directory).
	Output string
	// Duration, when set, replaces duration_ms.
	Duration time.Duration
	// Sets are --set overrides of the perfetto: section (tracepipe's
	// settings as traced: wait_for_producers, producer_socket, ...); the
	// session itself is the text config's, and other keys are refused.
	Sets []string
	// Env is the environment (os.Environ()): its TRACEPIPE_* config
	// variables come before Sets, under the same rule (only
	// TRACEPIPE_PERFETTO__* may be set); Warn gets the warnings about
	// TRACEPIPE_* variables that are not config (as Load's).
	Env  []string
	Warn func(string)
}

// DefaultTextConfigOutput is where a text config's trace goes without -o:
// where the embedded default config writes.
const DefaultTextConfigOutput = "out/trace-{timestamp}.pftrace"

// LoadTraceConfigText reads the Perfetto text config at path (untrusted,
// at most maxConfigFileSize bytes) and returns the session it describes,
// validated, with one file sink (opts.Output). Perfetto producers serve
// its data sources (perfetto.enabled is set), as under traced.
func LoadTraceConfigText(path string, opts TraceConfigTextOptions) (*Config, error) {
	data, err := readFileLimited(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return traceConfigFromText(path, data, opts)
}

func traceConfigFromText(name string, data []byte, opts TraceConfigTextOptions) (*Config, error) {
	bin, err := ParseTraceConfigText(name, data)
	if err != nil {
		return nil, err
	}
	cfg, err := ConfigFromTraceConfig(bin)
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return nil, textProblems(name, data, ve)
		}
		return nil, fmt.Errorf("%s: %w", name, annotateLines(err, data))
	}
	if opts.Duration > 0 {
		cfg.Duration = opts.Duration
	}
	if err := cfg.applyPerfettoSets(envOverrides(opts.Env, opts.Warn), opts.Sets); err != nil {
		return nil, err
	}
	out := opts.Output
	if out == "" {
		out = DefaultTextConfigOutput
	}
	cfg.fromText = true
	// ConfigFromTraceConfig's sink is the consumer's placeholder; here the
	// trace goes to a file.
	cfg.Sinks = []sinks.Config{{Type: sinks.SinkTypeFile, Path: out}}
	if err := cfg.Validate(); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return nil, textProblems(name, data, ve)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// ParseTraceConfigText parses a Perfetto text-format TraceConfig and
// returns it serialized. Errors say name:line:column and the field.
func ParseTraceConfigText(name string, data []byte) ([]byte, error) {
	var tc perfettoipc.TraceConfig
	if err := (prototext.UnmarshalOptions{}).Unmarshal(data, &tc); err != nil {
		return nil, textError(name, data, err)
	}
	b, err := proto.Marshal(&tc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// prototextPos matches the position prototext puts in its errors.
// (protobuf-go varies the space after "proto:" on purpose, a regular
// or a non-breaking one, so that nobody compares its messages verbatim).
var prototextPos = regexp.MustCompile(`^proto:[\s\x{00a0}]+(syntax error[\s\x{00a0}]+)?\(line (\d+):(\d+)\):[\s\x{00a0}]+(.*)$`)

// prototextPrefix matches the "proto: " of its other errors.
var prototextPrefix = regexp.MustCompile(`^proto:[\s\x{00a0}]+`)

// textError turns prototext's "proto: (line 3:5): unknown field: x" into
// "name:3:5: unknown field: x", and explains the one error the schema
// makes on purpose: a data-source config tracepipe does not model is a
// bytes field, so its message syntax does not parse.
func textError(name string, data []byte, err error) error {
	m := prototextPos.FindStringSubmatch(err.Error())
	if m == nil {
		msg := prototextPrefix.ReplaceAllString(err.Error(), "")
		if msg == "unexpected EOF" {
			msg = "unexpected end of the file (a { without its })"
		}
		return fmt.Errorf("%s: %s", name, msg)
	}
	line, _ := strconv.Atoi(m[2])
	msg := m[4]
	if m[1] != "" {
		msg = "syntax error: " + msg
	}
	if f := opaqueFieldOnLine(data, line); f != "" {
		msg += fmt.Sprintf(" (%s is a data-source config tracepipe's schema does not model: it can only be forwarded as bytes; give it as base64 in a YAML config's data_sources[i].perfetto_config.%s)", f, f)
	}
	return fmt.Errorf("%s:%s:%s: %s", name, m[2], m[3], msg)
}

// opaqueFieldOnLine returns the first word of line n (1-based) when it
// names a DataSourceConfig field the schema declares as bytes.
func opaqueFieldOnLine(data []byte, n int) string {
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	word := strings.TrimSpace(lines[n-1])
	if i := strings.IndexAny(word, " \t:{"); i >= 0 {
		word = word[:i]
	}
	fd := DataSourceConfigDesc().Fields().ByName(protoreflect.Name(word))
	if fd != nil && fd.Kind() == protoreflect.BytesKind && fd.Number() >= 100 {
		return word
	}
	return ""
}

// annotateLines adds, to the mapping's "not supported by tracepipe: a, b"
// error, the line of the text config where each refused field first
// appears.
func annotateLines(err error, data []byte) error {
	const marker = "not supported by tracepipe: "
	s := err.Error()
	i := strings.Index(s, marker)
	if i < 0 {
		return err
	}
	lines := strings.Split(string(data), "\n")
	var parts []string
	for _, item := range strings.Split(s[i+len(marker):], ", ") {
		// "buffers[1].fill_policy 77", "buffers[0] field 9": the path
		// before the space, found element by element; else the first
		// line that sets the field.
		path, _, _ := strings.Cut(item, " ")
		if n := textLine(data, path); n > 0 {
			parts = append(parts, fmt.Sprintf("%s (line %d)", item, n))
			continue
		}
		parts = append(parts, item+lineOf(lines, item))
	}
	return errors.New(s[:i+len(marker)] + strings.Join(parts, ", "))
}

// lineOf finds the first line that sets the last named field of item
// ("data_sources[0].machine_name_filter": machine_name_filter) and
// returns " (line N)", or "" when the item names no field.
func lineOf(lines []string, item string) string {
	last := item
	if j := strings.LastIndexByte(last, '.'); j >= 0 {
		last = last[j+1:]
	}
	if j := strings.IndexAny(last, " ["); j >= 0 {
		last = last[:j]
	}
	if last == "" {
		return ""
	}
	for n, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, last) {
			rest := strings.TrimSpace(t[len(last):])
			if strings.HasPrefix(rest, ":") || strings.HasPrefix(rest, "{") {
				return fmt.Sprintf(" (line %d)", n+1)
			}
		}
	}
	return ""
}

func DataSourceConfigDesc() protoreflect.MessageDescriptor {
	return (&perfettoipc.DataSourceConfig{}).ProtoReflect().Descriptor()
}

// traceConfigSchemaName names a TraceConfig field by the schema, or by its
// number when the schema does not know it.
func traceConfigSchemaName(num protowire.Number) string {
	fd := (&perfettoipc.TraceConfig{}).ProtoReflect().Descriptor().Fields().ByNumber(num)
	if fd == nil {
		return fmt.Sprintf("field %d", num)
	}
	return string(fd.Name())
}

// FromPerfettoText reports whether the config is a Perfetto text config's
// (LoadTraceConfigText): its data sources are meant for Perfetto
// producers, built-in names included.
func (c *Config) FromPerfettoText() bool { return c.fromText }

// applyPerfettoSets applies TRACEPIPE_* variables (envs), then --set
// overrides, of the perfetto: section to a text config's session, with the
// loader's parsing and decoding.
func (c *Config) applyPerfettoSets(envs []override, sets []string) error {
	if len(envs)+len(sets) == 0 {
		return nil
	}
	raw := map[string]any{}
	for _, o := range envs {
		if o.path[0].key != "perfetto" || len(o.path) < 2 {
			return fmt.Errorf("%s: a Perfetto text config is run as written; only tracepipe's perfetto.* settings may be set (%sPERFETTO__*): unset it, edit the text config, or write the session in YAML with data_sources[i].perfetto_config", o.source, EnvPrefix)
		}
		var err error
		if raw, err = applyOverride(raw, o); err != nil {
			return err
		}
	}
	for _, s := range sets {
		o, err := parseSet(s)
		if err != nil {
			return err
		}
		if o.path[0].key != "perfetto" || len(o.path) < 2 {
			return fmt.Errorf("--set %s: a Perfetto text config is run as written; only the perfetto.* settings (tracepipe's, as traced) may be overridden (edit the text config, or write the session in YAML with data_sources[i].perfetto_config)", s)
		}
		if raw, err = applyOverride(raw, o); err != nil {
			return err
		}
	}
	var d decoder
	section := struct {
		Perfetto PerfettoConfig `koanf:"perfetto"`
	}{c.Perfetto}
	d.decodeStruct("", raw, reflect.ValueOf(&section).Elem())
	if len(d.problems) > 0 {
		return &ValidationError{Problems: attributeEnv(d.problems, envs)}
	}
	c.Perfetto = section.Perfetto
	return nil
}

// textFieldNames are the text config's names of the fields the mapping
// (ConfigFromTraceConfig) validates under tracepipe's names.
var textFieldNames = map[string]string{
	"duration":                       "duration_ms",
	"file_write_period":              "file_write_period_ms",
	"max_file_size":                  "max_file_size_bytes",
	"flush_period":                   "flush_period_ms",
	"flush_timeout":                  "flush_timeout_ms",
	"incremental_state.clear_period": "incremental_state_config.clear_period_ms",
	"incremental_state":              "incremental_state_config",
}

// textDataSourceFields are data_sources[i]'s fields that the text config
// writes inside data_sources[i].config (DataSourceConfig).
var textDataSourceFields = map[string]bool{
	"name": true, "target_buffer": true, "target_buffer_name": true, "buffer_exhausted_policy": true,
}

// textProblems renames the mapping's problems to the text config's
// fields and puts each at name:line (the line of the field, or of the
// element its index names), so that a range error reads as a syntax error
// does: "t.pbtxt:13: duration_ms: must be ...".
func textProblems(name string, data []byte, ve *ValidationError) error {
	out := &ValidationError{Problems: make([]Problem, len(ve.Problems))}
	for i, p := range ve.Problems {
		path := textFieldPath(p.Path)
		where := name
		if n := textLine(data, path); n > 0 {
			where = fmt.Sprintf("%s:%d", name, n)
		}
		if path == "" {
			out.Problems[i] = Problem{Path: where, Message: p.Message}
		} else {
			out.Problems[i] = Problem{Path: where + ": " + path, Message: p.Message}
		}
	}
	return out
}

// textFieldPath maps a tracepipe config path to the text config's.
func textFieldPath(path string) string {
	if n, ok := textFieldNames[path]; ok {
		return n
	}
	if rest, ok := strings.CutPrefix(path, "data_sources["); ok {
		if j := strings.Index(rest, "]."); j >= 0 && textDataSourceFields[rest[j+2:]] {
			return "data_sources[" + rest[:j] + "].config." + rest[j+2:]
		}
	}
	return path
}

// textLine returns the 1-based line of the field path names in a text
// config (a.b[2].c: the third a.b block's c), the line of the deepest
// element found when the field itself is not written (a default), or 0.
// It follows the braces of the text format, skipping strings and comments;
// the text has already parsed.
func textLine(data []byte, path string) int {
	type seg struct {
		name  string
		index int
	}
	var segs []seg
	for part := range strings.SplitSeq(path, ".") {
		sg := seg{name: part}
		if j := strings.IndexByte(part, '['); j > 0 && strings.HasSuffix(part, "]") {
			n, err := strconv.Atoi(part[j+1 : len(part)-1])
			if err != nil {
				return 0
			}
			sg = seg{name: part[:j], index: n}
		}
		segs = append(segs, sg)
	}
	line, found := 1, 0
	depth, want := 0, 0 // want: the depth at which segs[matched] is looked for
	matched := 0
	seen := 0 // occurrences of segs[matched].name at depth want
	for i := 0; i < len(data) && matched < len(segs); i++ {
		c := data[i]
		switch {
		case c == '\n':
			line++
		case c == '#':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i-- // the newline is counted above
		case c == '"' || c == '\'':
			for i++; i < len(data) && data[i] != c; i++ {
				if data[i] == '\\' {
					i++
				} else if data[i] == '\n' {
					line++
				}
			}
		case c == '{' || c == '<':
			depth++
		case c == '}' || c == '>':
			depth--
			if depth < want { // left the element being searched
				return found
			}
		case isIdentStart(c):
			j := i
			for j < len(data) && isIdentPart(data[j]) {
				j++
			}
			word := string(data[i:j])
			i = j - 1
			if depth != want || word != segs[matched].name || !fieldFollows(data[j:]) {
				continue
			}
			if seen < segs[matched].index {
				seen++
				continue
			}
			found = line
			matched++
			want, seen = depth+1, 0
		}
	}
	return found
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentPart(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// fieldFollows reports whether a field name is followed by ':' or a
// message's '{' / '<' (not a value such as an enum name).
func fieldFollows(rest []byte) bool {
	for _, c := range rest {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case ':', '{', '<':
			return true
		}
		return false
	}
	return false
}
