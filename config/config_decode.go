package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tracepipe/tracepipe/internal/names"

	"github.com/tracepipe/tracepipe/sinks"
)

// decoder turns the nested map the parser produced (values as the YAML, TOML or
// JSON parser typed them) into a Config, following the koanf struct tags.
// It collects one Problem per unknown key or mistyped value and goes on.
type decoder struct {
	problems []Problem
}

func (d *decoder) bad(path, format string, args ...any) {
	d.problems = append(d.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// field is one koanf-tagged field of a struct type.
type field struct {
	key   string
	index int
}

func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("koanf")
		if key == "" || key == "-" || !f.IsExported() {
			continue
		}
		out = append(out, field{key, i})
	}
	return out
}

// joinPath appends a map key to a path: "buffers[0]" + "size_kb". A key
// that is empty or holds characters other than letters, digits, '_' and
// '-' is quoted, so that a literal "a.b" key is not mistaken for a path.
func joinPath(path, key string) string {
	if key == "" || strings.IndexFunc(key, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) >= 0 {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) decodeStruct(path string, raw any, v reflect.Value) {
	m, ok := asMap(raw)
	if !ok {
		d.bad(path, "want a map of settings, got %s", describe(raw))
		return
	}
	fields := fieldsOf(v.Type())
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := joinPath(path, k)
		i := -1
		for _, f := range fields {
			if f.key == k {
				i = f.index
				break
			}
		}
		if i < 0 {
			if d.section(p, k, m[k], v) {
				continue
			}
			d.bad(p, "unknown key%s", suggest(k, fields))
			continue
		}
		d.decodeValue(p, k, m[k], v.Field(i))
	}
}

// sectionDecoder is a struct with keys beyond its fields: a sink config
// takes the section of its type (`file: {...}`, `nats: {...}`), which
// the type's factory decodes.
type sectionDecoder interface {
	DecodeSection(key string, raw map[string]any) bool
}

// section offers an unknown key to v's DecodeSection; it reports whether
// v took it.
func (d *decoder) section(path, key string, raw any, v reflect.Value) bool {
	if !v.CanAddr() {
		return false
	}
	sd, ok := v.Addr().Interface().(sectionDecoder)
	if !ok {
		return false
	}
	m, isMap := asMap(raw)
	if raw == nil {
		m, isMap = map[string]any{}, true
	}
	if !isMap {
		if sd.DecodeSection(key, nil) {
			d.bad(path, "want a map of settings, got %s", describe(raw))
			return true
		}
		return false
	}
	nm, _ := normalizeFree(m).(map[string]any)
	return sd.DecodeSection(key, nm)
}

// decodeValue stores raw into v. A nil raw (a key without a value) leaves
// the zero value.
func (d *decoder) decodeValue(path, key string, raw any, v reflect.Value) {
	if raw == nil {
		return
	}
	if v.Type() == durationType {
		if n, ok := toInt(raw); ok && n == 0 {
			v.SetInt(0) // a bare 0 is 0 in every unit ("duration: 0")
			return
		}
		s, ok := raw.(string)
		dur, err := time.ParseDuration(s)
		if !ok || err != nil {
			d.bad(path, "want a duration like \"10s\", got %s", describe(raw))
			return
		}
		v.SetInt(int64(dur))
		return
	}
	if (key == "max_file_size" || byteSizeKeys[key]) && v.Kind() == reflect.Int64 {
		n, ok := toInt(raw)
		if !ok {
			s, isStr := raw.(string)
			var err error
			if n, err = ParseByteSize(s); !isStr || err != nil {
				d.bad(path, "want a byte count or a size like \"64MiB\", got %s", describe(raw))
				return
			}
		}
		v.SetInt(n)
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		b, ok := raw.(bool)
		if !ok {
			d.bad(path, "want true or false, got %s", describe(raw))
			return
		}
		v.SetBool(b)
	case reflect.String:
		s, ok := raw.(string)
		if !ok {
			d.bad(path, "want a string, got %s", describe(raw))
			return
		}
		v.SetString(s)
	case reflect.Uint32:
		n, ok := toInt(raw)
		if !ok || n < 0 {
			d.bad(path, "want a non-negative integer, got %s", describe(raw))
			return
		}
		if n > math.MaxUint32 {
			d.bad(path, "want an integer <= %d, got %s", uint64(math.MaxUint32), describe(raw))
			return
		}
		v.SetUint(uint64(n))
	case reflect.Float64:
		f, ok := toFloat(raw)
		if !ok {
			d.bad(path, "want a number, got %s", describe(raw))
			return
		}
		v.SetFloat(f)
	case reflect.Int, reflect.Int64:
		n, ok := toInt(raw)
		if !ok || v.OverflowInt(n) {
			d.bad(path, "want an integer, got %s", describe(raw))
			return
		}
		v.SetInt(n)
	case reflect.Map:
		m, ok := asMap(raw)
		if !ok {
			d.bad(path, "want a map, got %s", describe(raw))
			return
		}
		v.Set(reflect.ValueOf(normalizeFree(m)))
	case reflect.Pointer:
		e := reflect.New(v.Type().Elem())
		d.decodeValue(path, key, raw, e.Elem())
		v.Set(e)
	case reflect.Struct:
		d.decodeStruct(path, raw, v)
	case reflect.Slice:
		list, ok := asList(raw)
		if !ok {
			d.bad(path, "want a list, got %s", describe(raw))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(list), len(list))
		for i, e := range list {
			ep := fmt.Sprintf("%s[%d]", path, i)
			if e == nil && s.Index(i).Kind() == reflect.Struct {
				continue // "- " with nothing: an element with every field unset
			}
			d.decodeValue(ep, key, e, s.Index(i))
		}
		v.Set(s)
	default:
		d.bad(path, "cannot decode into %s", v.Type())
	}
}

// normalizeFree normalises a free-form section (data_sources[i].config) so
// that it is the same whatever the file format: every integral number is an
// int (YAML gives int, TOML int64, JSON float64; an integral float such as
// 2.0 becomes 2), or an int64/uint64 beyond int's range; maps are
// map[string]any and lists []any, recursively. Other values are kept.
func normalizeFree(v any) any {
	if m, ok := asMap(v); ok {
		out := make(map[string]any, len(m))
		for k, e := range m {
			out[k] = normalizeFree(e)
		}
		return out
	}
	if l, ok := v.([]any); ok {
		out := make([]any, len(l))
		for i, e := range l {
			out[i] = normalizeFree(e)
		}
		return out
	}
	switch n := v.(type) {
	case float64:
		if n == math.Trunc(n) && math.Abs(n) <= 1<<53 {
			return int(n)
		}
		return n
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		if i, ok := toInt(n); ok && int64(int(i)) == i {
			return int(i)
		}
	}
	return v
}

// asMap accepts the map shapes the parsers produce.
func asMap(raw any) (map[string]any, bool) {
	switch m := raw.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[fmt.Sprint(k)] = v
		}
		return out, true
	}
	return nil, false
}

// asList accepts any slice ([]any from every parser; typed slices in case a
// parser ever produces them).
func asList(raw any) ([]any, bool) {
	if l, ok := raw.([]any); ok {
		return l, true
	}
	rv := reflect.ValueOf(raw)
	if rv.Kind() != reflect.Slice || rv.Type().Elem().Kind() == reflect.Uint8 {
		return nil, false
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, true
}

// toInt accepts the integer types the parsers produce (YAML int/uint64,
// TOML int64) and integral floats (JSON numbers are float64).
func toInt(raw any) (int64, bool) {
	switch n := raw.(type) {
	case int:
		return int64(n), true
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint:
		return int64(n), uint64(n) <= math.MaxInt64
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		return int64(n), n <= math.MaxInt64
	case float32:
		return toInt(float64(n))
	case float64:
		if n != math.Trunc(n) || n < -(1<<63) || n >= 1<<63 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}

// describe renders a raw value for "got ..." in messages.
func describe(raw any) string {
	switch v := raw.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32)
	case bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(v)
	case time.Time:
		return "a date/time " + v.Format(time.RFC3339Nano)
	}
	if _, ok := asMap(raw); ok {
		return "a map"
	}
	if _, ok := asList(raw); ok {
		return "a list"
	}
	return fmt.Sprintf("%v (%T)", raw, raw)
}

// hintSectionKeys rewrites the "unknown key" problem of a key written
// beside a sink's type that belongs in the type's section (sinks[1].address
// for a relay sink), naming the key the user must type instead:
// sinks[1].relay.address.
func hintSectionKeys(problems []Problem, c *Config) {
	for i, pr := range problems {
		if !strings.HasPrefix(pr.Message, "unknown key") {
			continue
		}
		var n int
		var key string
		if _, err := fmt.Sscanf(pr.Path, "sinks[%d].", &n); err != nil || n < 0 || n >= len(c.Sinks) {
			continue
		}
		_, key, _ = strings.Cut(pr.Path, "].")
		typ := c.Sinks[n].Type
		if key == "" || strings.ContainsAny(key, ".[\"") || typ == "" || !sinks.TypeHasKey(typ, key) {
			continue
		}
		problems[i].Message = fmt.Sprintf("unknown key (did you mean sinks[%d].%s.%s? a %s sink's settings go in its %s section)", n, typ, key, typ, typ)
	}
}

// Perfetto's TraceConfig names that differ from ours by more than a typo.
var keyAliases = map[string]string{
	"incremental_state_config": "incremental_state",
	"max_file_size_bytes":      "max_file_size",
	"shm_size_kb":              "smb_size_kb",
	"page_size_kb":             "smb_page_size_kb",
	"protovm_config":           "protovm",
}

// suggest returns " (did you mean X?)" for an unknown key close to a known
// one (edit distance ≤ 2, or a Perfetto name), else "".
func suggest(key string, fields []field) string {
	known := func(k string) bool {
		for _, f := range fields {
			if f.key == k {
				return true
			}
		}
		return false
	}
	lk := strings.ToLower(key)
	if first, rest, ok := strings.Cut(key, "."); ok && known(first) {
		return fmt.Sprintf(" (keys are not split at dots: nest %s under %s)", rest, first)
	}
	if a, ok := keyAliases[lk]; ok && known(a) {
		return fmt.Sprintf(" (did you mean %s?)", a)
	}
	if base, ok := strings.CutSuffix(lk, "_ms"); ok && known(base) {
		return fmt.Sprintf(" (did you mean %s? it takes a duration like \"10s\")", base)
	}
	best, bestD := "", 3
	for _, f := range fields {
		if d := names.EditDistance(lk, f.key, bestD); d < bestD {
			best, bestD = f.key, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// ParseByteSize parses a byte count for max_file_size: see
// sinks.ParseByteSize, which owns the syntax (sink sections use it too).
func ParseByteSize(s string) (int64, error) { return sinks.ParseByteSize(s) }

// toFloat accepts any number (skip_probability: 0, 1, 0.5).
func toFloat(raw any) (float64, bool) {
	switch f := raw.(type) {
	case float64:
		return f, true
	case float32:
		return float64(f), true
	}
	n, ok := toInt(raw)
	return float64(n), ok
}

// ParseMemoryBound reads a memory bound as the --max-memory style flags
// take it: "" is 0 (the default bound), "none" is -1 (no bound), else a
// positive size like 8GiB.
func ParseMemoryBound(v string) (int64, error) {
	switch v {
	case "":
		return 0, nil
	case "none":
		return -1, nil
	}
	n, err := ParseByteSize(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a size like 8GiB, or none", v)
	}
	return n, nil
}
