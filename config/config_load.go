package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	kjson "github.com/knadh/koanf/parsers/json"
	ktoml "github.com/knadh/koanf/parsers/toml/v2"
	kyaml "github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
	"go.yaml.in/yaml/v3"

	"github.com/tracepipe/tracepipe/configs"
	"github.com/tracepipe/tracepipe/sinks"
)

// EnvPrefix is the prefix of the environment variables that override
// config keys: TRACEPIPE_DURATION=30s, TRACEPIPE_PRODUCERS__SMB_SIZE_KB=1024
// ("__" nests), TRACEPIPE_BUFFERS__0__SIZE_KB=1024 (a number is a list index).
const EnvPrefix = "TRACEPIPE_"

// maxConfigDepth bounds how deeply maps and lists may nest in a config (a
// real one needs about 6 levels). Deeper inputs are refused up front, so
// that the recursive decoder and override paths stay bounded.
const maxConfigDepth = 64

// maxConfigFileSize bounds what Load reads from a config, plugin or program
// file (a config naming /dev/zero must not hang the loader), and so the
// loader's memory: parsing YAML into maps costs about 100 times the file's
// size (a 3 MB list took 290-356 MB), so 4 MiB keeps a hostile file under
// about half a GB, while a real config is a few KiB.
const maxConfigFileSize = 4 << 20

// Load reads a configuration and returns it with defaults applied and
// validated. Sources, lowest priority first:
//
//  1. the file opts.Path, parsed by its extension (.yaml/.yml, .toml, .json),
//     or the embedded default (configs.Default) when Path is "";
//  2. TRACEPIPE_* entries of opts.Env: the name after the prefix, lowercased,
//     is the key path, "__" separating its parts and a part made of digits
//     indexing a list (TRACEPIPE_BUFFERS__0__SIZE_KB); values are YAML scalars;
//  3. opts.Sets, "key=value" with dotted keys and [i] list indices
//     ("buffers[1].size_kb=2048"), values YAML scalars ("true", "12", "10s",
//     "[a, b]"); an empty value is the empty string. Index len(list) appends
//     an element; a larger index is an error.
//
// A file that cannot be read or parsed, or an override that cannot be
// applied, is a plain error naming the file or override. Unknown keys,
// mistyped values and rule violations are all reported at once in a
// *ValidationError. Relative paths in the config (data_sources[i].plugin,
// data_sources[i].protovm.program) are resolved against the config file's
// directory (the current directory for the embedded default) and stored
// resolved; ProtoVM programs are compiled into ProgramBytes.
func Load(opts LoadOptions) (*Config, error) {
	name, data, baseDir, err := readConfigSource(opts.Path)
	if err != nil {
		return nil, err
	}
	c, err := loadBytes(name, data, baseDir, opts.Env, opts.Sets, opts.Output, opts.Warn)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// readConfigSource returns the display name, bytes and base directory of
// the config file (or of the embedded default).
func readConfigSource(path string) (name string, data []byte, baseDir string, err error) {
	if path == "" {
		data, err := configs.Files.ReadFile(configs.Default)
		if err != nil {
			return "", nil, "", fmt.Errorf("embedded default config: %w", err)
		}
		return configs.Default + " (embedded)", data, "", nil
	}
	if _, err := configFormat(path); err != nil {
		return "", nil, "", err
	}
	data, err = readFileLimited(path)
	if err != nil {
		return "", nil, "", fmt.Errorf("config: %w", err)
	}
	abs, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return "", nil, "", fmt.Errorf("config %s: %w", path, err)
	}
	return path, data, abs, nil
}

// readFileLimited reads a regular file of at most maxConfigFileSize bytes.
// It opens non-blocking so that a FIFO named by mistake cannot hang it.
func readFileLimited(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > maxConfigFileSize {
		return nil, fmt.Errorf("%s is too large (%d bytes, at most %d)", path, fi.Size(), maxConfigFileSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConfigFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigFileSize {
		return nil, fmt.Errorf("%s is too large (more than %d bytes)", path, maxConfigFileSize)
	}
	return b, nil
}

// configFormat returns a config file's format by its extension: "yaml",
// "toml" or "json".
func configFormat(name string) (string, error) {
	switch ext := filepath.Ext(name); strings.ToLower(ext) {
	case ".yaml", ".yml":
		return "yaml", nil
	case ".toml":
		return "toml", nil
	case ".json":
		return "json", nil
	case "":
		return "", fmt.Errorf("config %s: no file extension; want .yaml, .yml, .toml or .json", name)
	default:
		return "", fmt.Errorf("config %s: unknown extension %q; want .yaml, .yml, .toml or .json", name, ext)
	}
}

// parseConfig parses a config file into its raw map with koanf's parser
// for its format (rawbytes provider); the hand-written decoder
// (config_decode.go) turns the map into a Config with field-path messages.
// Values nested deeper than maxConfigDepth are refused before koanf copies
// the map (copystructure's cost grows with the square of the depth).
// Errors name the file.
func parseConfig(name string, data []byte) (map[string]any, error) {
	format, err := configFormat(strings.TrimSuffix(name, " (embedded)"))
	if err != nil {
		return nil, err
	}
	var p koanf.Parser
	switch format {
	case "yaml":
		p = kyaml.Parser()
	case "toml":
		p = ktoml.Parser()
	case "json":
		p = kjson.Parser()
	}
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(data), depthLimited{p}); err != nil {
		if format == "yaml" {
			err = yamlErrorLine(data, err)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return k.Raw(), nil
}

// yamlSyntaxError matches the YAML parser's "yaml: line N: problem".
var yamlSyntaxError = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxYAMLLineSearch bounds the bytes yamlErrorLine re-parses in all (a
// config of a few hundred lines costs well under a megabyte).
const maxYAMLLineSearch = 16 << 20

// yamlErrorLine replaces the line of a YAML syntax error with the line
// holding the problem. The parser names the line where the enclosing
// construct began, counted from 0 for parser errors, so its number is
// often one or more too low. The problem's line is the first line after
// the longest prefix of the file that still parses: every longer prefix
// fails. When that search would parse more than maxYAMLLineSearch bytes,
// the parser's message is kept.
func yamlErrorLine(data []byte, err error) error {
	m := yamlSyntaxError.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	lines := strings.SplitAfter(string(data), "\n")
	budget := maxYAMLLineSearch
	size := len(data)
	for n := len(lines) - 1; n >= 0; n-- {
		size -= len(lines[n])
		if budget -= size; budget < 0 {
			return err
		}
		var v any
		if yaml.Unmarshal(data[:size], &v) == nil {
			return fmt.Errorf("yaml: line %d: %s", n+1, m[2])
		}
	}
	return err
}

// depthLimited wraps a koanf parser to refuse values nested deeper than
// maxConfigDepth before koanf copies them.
type depthLimited struct{ koanf.Parser }

func (p depthLimited) Unmarshal(b []byte) (map[string]any, error) {
	m, err := p.Parser.Unmarshal(b)
	if err != nil {
		return nil, err
	}
	if tooDeep(m, 1) {
		return nil, fmt.Errorf("values nest deeper than %d levels", maxConfigDepth)
	}
	return m, nil
}

// tooDeep reports whether v, at nesting level depth, has maps or lists
// nested beyond maxConfigDepth.
func tooDeep(v any, depth int) bool {
	if depth > maxConfigDepth {
		return true
	}
	switch c := v.(type) {
	case map[string]any:
		for _, e := range c {
			if tooDeep(e, depth+1) {
				return true
			}
		}
	case map[any]any:
		for _, e := range c {
			if tooDeep(e, depth+1) {
				return true
			}
		}
	case []any:
		for _, e := range c {
			if tooDeep(e, depth+1) {
				return true
			}
		}
	}
	return false
}

// loadBytes is Load after the file was read: name chooses the parser (by
// extension) and names the source in errors.
func loadBytes(name string, data []byte, baseDir string, environ, sets []string, output string, warn func(string)) (*Config, error) {
	raw, err := parseConfig(name, data)
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s: the file holds no settings", name)
	}

	var errs []error
	// Environment, then --set: later writes win.
	envs := envOverrides(environ, warn)
	for _, o := range envs {
		raw, err = applyOverride(raw, o)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range sets {
		o, err := parseSet(s)
		if err == nil {
			raw, err = applyOverride(raw, o)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if tooDeep(raw, 1) {
		return nil, fmt.Errorf("overrides: values nest deeper than %d levels", maxConfigDepth)
	}

	var d decoder
	c := &Config{}
	d.decodeStruct("", raw, reflect.ValueOf(c).Elem())
	hintSectionKeys(d.problems, c)
	c.baseDir = baseDir
	c.envs = envs
	c.resolveSinkPaths()
	if output != "" {
		c.setOutput(output) // -o: relative to the working directory
	}
	c.SetDefaults()
	problems := d.problems
	problems = append(problems, c.check(problems)...)
	// Every problem at or below a path a variable set names the variable,
	// rule violations as much as mistyped values.
	problems = attributeEnv(problems, envs)
	if len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	if warn != nil {
		for _, w := range c.Warnings() {
			warn(w)
		}
	}
	return c, nil
}

// pathSeg is one step of an override key: a map key or a list index.
type pathSeg struct {
	key     string
	index   int
	isIndex bool
}

// override is one environment or --set override.
type override struct {
	source string // how to name it in errors: "--set a=b" or "TRACEPIPE_A"
	path   []pathSeg
	value  any
}

// parseScalar parses an override value as YAML ("" stays the empty string;
// text that is not valid YAML, or that YAML reads as a map without braces,
// like "a: b", stays a string).
func parseScalar(s string) any {
	if strings.TrimSpace(s) == "" {
		return s
	}
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	if _, isMap := asMap(v); isMap && !strings.HasPrefix(strings.TrimSpace(s), "{") {
		return s
	}
	if v == nil && strings.Contains(s, "#") {
		return s // "#x" is a comment to YAML, not what the user meant
	}
	return v
}

// parseSet parses "key=value" with key a dotted path with [i] indices.
func parseSet(s string) (override, error) {
	key, val, ok := strings.Cut(s, "=")
	if !ok {
		return override{}, fmt.Errorf("--set %q: want key=value", s)
	}
	src := "--set " + s
	path, err := parseSetKey(key)
	if err != nil {
		return override{}, fmt.Errorf("%s: %v", src, err)
	}
	return override{source: src, path: path, value: parseScalar(val)}, nil
}

// parseSetKey parses "a.b[1].c[0][2]".
func parseSetKey(key string) ([]pathSeg, error) {
	key = strings.TrimSpace(key)
	if key == "" {
		return nil, errors.New("empty key")
	}
	var segs []pathSeg
	for part := range strings.SplitSeq(key, ".") {
		name, rest, _ := strings.Cut(part, "[")
		if name == "" || strings.ContainsAny(name, "]") {
			return nil, fmt.Errorf("bad key %q: want dotted names with [i] indices, like buffers[0].size_kb", key)
		}
		segs = append(segs, pathSeg{key: name})
		if rest == "" && !strings.Contains(part, "[") {
			continue
		}
		rest = "[" + rest
		for rest != "" {
			if rest[0] != '[' {
				return nil, fmt.Errorf("bad key %q: want dotted names with [i] indices, like buffers[0].size_kb", key)
			}
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, fmt.Errorf("bad key %q: missing ]", key)
			}
			n, err := strconv.Atoi(rest[1:end])
			if err != nil || n < 0 || rest[1] == '+' {
				return nil, fmt.Errorf("bad key %q: index %q is not a non-negative integer", key, rest[1:end])
			}
			segs = append(segs, pathSeg{index: n, isIndex: true})
			rest = rest[end+1:]
		}
	}
	return segs, nil
}

func lessPath(a, b []pathSeg, sa, sb string) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if x.isIndex != y.isIndex {
			return y.isIndex
		}
		if x.isIndex && x.index != y.index {
			return x.index < y.index
		}
		if !x.isIndex && x.key != y.key {
			return x.key < y.key
		}
	}
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return sa < sb
}

// applyOverride sets o.value at o.path in the raw config map.
func applyOverride(raw map[string]any, o override) (map[string]any, error) {
	for _, s := range o.path {
		if !s.isIndex && s.key == "" {
			return raw, fmt.Errorf("%s: empty key", o.source)
		}
	}
	nv, err := setPath(raw, o.path, o.value, "")
	if err != nil {
		return raw, fmt.Errorf("%s: %v", o.source, err)
	}
	return nv.(map[string]any), nil
}

// setPath returns cur with val stored at path (cur may be nil: the
// containers are created). where names cur in errors.
func setPath(cur any, path []pathSeg, val any, where string) (any, error) {
	if len(path) == 0 {
		return val, nil
	}
	s := path[0]
	if s.isIndex {
		var list []any
		if cur != nil {
			l, ok := cur.([]any)
			if !ok {
				return nil, fmt.Errorf("%s is %s, not a list", where, describe(cur))
			}
			list = l
		}
		elem := fmt.Sprintf("%s[%d]", where, s.index)
		if s.index > len(list) {
			return nil, fmt.Errorf("index %d is out of range: %s has %d elements (index %d appends one)", s.index, where, len(list), len(list))
		}
		var old any
		if s.index < len(list) {
			old = list[s.index]
		}
		nv, err := setPath(old, path[1:], val, elem)
		if err != nil {
			return nil, err
		}
		if s.index == len(list) {
			list = append(list, nv)
		} else {
			list[s.index] = nv
		}
		return list, nil
	}
	var m map[string]any
	if cur != nil {
		mm, ok := asMap(cur)
		if !ok {
			if _, isList := cur.([]any); isList {
				idx := "0"
				if _, err := strconv.Atoi(s.key); err == nil {
					idx = s.key
				}
				return nil, fmt.Errorf("%s is a list; index it like %s[%s]", where, where, idx)
			}
			return nil, fmt.Errorf("%s is %s, not a map", where, describe(cur))
		}
		m = mm
	} else {
		m = map[string]any{}
	}
	nv, err := setPath(m[s.key], path[1:], val, joinPath(where, s.key))
	if err != nil {
		return nil, err
	}
	m[s.key] = nv
	return m, nil
}

// resolveSinkPaths makes every relative file-sink path relative to the
// config file's directory, the rule data_sources[i].plugin, protovm
// programs and plugin_dir follow: one rule for every path in a config
// file (and in its --set and TRACEPIPE_ overrides). The embedded default
// has no directory: its paths, like -o, are the working directory's.
func (c *Config) resolveSinkPaths() {
	if c.baseDir == "" {
		return
	}
	for i := range c.Sinks {
		sc := &c.Sinks[i]
		if sc.Type != sinks.SinkTypeFile {
			continue
		}
		if sc.Path != "" && sc.Path != sinks.StdoutPath {
			sc.Path = c.resolve(sc.Path)
		}
		if sec := sc.Sections[sinks.SinkTypeFile]; sec != nil {
			if p, ok := sec["path"].(string); ok && p != "" && p != sinks.StdoutPath {
				sec["path"] = c.resolve(p)
			}
		}
	}
}

// setOutput points the first file sink at path, adding one if needed.
// A "none" compression is dropped so that the name decides (-o x.gz
// compresses); another compression that the name contradicts stays, and
// validation reports the mismatch.
func (c *Config) setOutput(path string) {
	for i := range c.Sinks {
		sc := &c.Sinks[i]
		if sc.Type != sinks.SinkTypeFile {
			continue
		}
		if sc.Compression == sinks.CompressionNone {
			sc.Compression = ""
		}
		if sec := sc.Sections[sinks.SinkTypeFile]; sec != nil && sc.Path == "" {
			if sec["compression"] == sinks.CompressionNone {
				delete(sec, "compression")
			}
			sec["path"] = path
			return
		}
		sc.Path = path
		return
	}
	c.Sinks = append(c.Sinks, sinks.Config{Type: sinks.SinkTypeFile, Path: path})
}
