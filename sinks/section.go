package sinks

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tracepipe/tracepipe/internal/names"
)

// Section reads one sink type's config section for a Factory: each getter
// takes a key, records a FieldError when the value has the wrong type, and
// marks the key as known; Err then adds an "unknown key" error for every
// key no getter asked for. Values are what the config parsers produce
// (YAML, TOML and JSON numbers, strings, bools), plus int64 and
// time.Duration for sections built in code.
//
//	sec := sinks.NewSection(m)
//	url := sec.String("url", "nats://127.0.0.1:4222")
//	n := sec.Int("max_pending", 64)
//	if err := sec.Err(); err != nil { return nil, err }
type Section struct {
	m     map[string]any
	seen  map[string]bool
	errs  FieldErrors
	eff   map[string]any // when EffectiveSection asks: every value a getter returned
	probe *sectionProbe  // set by SectionKeysOf (section_probe.go)
}

// effectiveKey, present in a section given to NewSection, points at the
// map EffectiveSection collects the section's effective values into.
const effectiveKey = "\x00effective"

// NewSection wraps a decoded section (nil is an empty section).
func NewSection(m map[string]any) *Section {
	s := &Section{m: m, seen: map[string]bool{}}
	if eff, ok := m[effectiveKey].(map[string]any); ok {
		s.eff = eff
		s.m = maps.Clone(m)
		delete(s.m, effectiveKey)
	}
	if p, ok := m[probeKey].(*sectionProbe); ok {
		s.probe = p
		s.seen[probeKey] = true
	}
	return s
}

// record notes the value a getter returned for key (its default when the
// key is absent), as the config file would spell it.
func (s *Section) record(key string, v any) {
	if s.eff == nil {
		return
	}
	if d, ok := v.(time.Duration); ok {
		v = d.String()
	}
	s.eff[key] = v
}

// Has reports whether key is set (to a non-nil value).
func (s *Section) Has(key string) bool {
	s.seen[key] = true
	s.probe.record(key, "")
	return s.m[key] != nil
}

// Bad records a problem with key (for checks beyond types: ranges, enums).
func (s *Section) Bad(key, format string, args ...any) { s.errs.Add(key, format, args...) }

func (s *Section) get(key, kind string) (any, bool) {
	s.seen[key] = true
	s.probe.record(key, kind)
	v, ok := s.m[key]
	return v, ok && v != nil
}

// String returns a string value, or def when the key is absent.
func (s *Section) String(key, def string) string {
	v := s.stringRaw(key, def)
	s.record(key, v)
	return v
}

// stringRaw is String without recording.
func (s *Section) stringRaw(key, def string) string {
	v, ok := s.get(key, "string")
	if !ok {
		return def
	}
	str, isStr := v.(string)
	if !isStr {
		s.Bad(key, "want a string, got %v", v)
		return def
	}
	return str
}

// Bool returns a bool value, or def.
func (s *Section) Bool(key string, def bool) bool {
	v := s.boolRaw(key, def)
	s.record(key, v)
	return v
}

// boolRaw is Bool without recording.
func (s *Section) boolRaw(key string, def bool) bool {
	v, ok := s.get(key, "boolean")
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		s.Bad(key, "want true or false, got %v", v)
		return def
	}
	return b
}

// Int returns an integer value, or def. Integral floats (JSON) are
// accepted.
func (s *Section) Int(key string, def int64) int64 {
	v := s.intRaw(key, def)
	s.record(key, v)
	return v
}

// intRaw is Int without recording.
func (s *Section) intRaw(key string, def int64) int64 {
	v, ok := s.get(key, "integer")
	if !ok {
		return def
	}
	n, isInt := toInt64(v)
	if !isInt {
		s.Bad(key, "want an integer, got %v", v)
		return def
	}
	return n
}

// Duration returns a duration given as a Go duration string ("5s"), or def.
func (s *Section) Duration(key string, def time.Duration) time.Duration {
	v := s.durationRaw(key, def)
	s.record(key, v)
	return v
}

// durationRaw is Duration without recording.
func (s *Section) durationRaw(key string, def time.Duration) time.Duration {
	v, ok := s.get(key, "duration")
	if !ok {
		return def
	}
	switch d := v.(type) {
	case time.Duration:
		return d
	case string:
		if p, err := time.ParseDuration(d); err == nil {
			return p
		}
	case int, int64, uint64:
		if d == 0 || d == int64(0) || d == uint64(0) {
			return 0 // a bare 0 is 0 in every unit
		}
	case float64:
		if d == 0 {
			return 0
		}
	}
	s.Bad(key, "want a duration like \"10s\", got %v", v)
	return def
}

// ByteSize returns a byte count given as an integer or a string with a
// unit (see [ParseByteSize]), or def.
func (s *Section) ByteSize(key string, def int64) int64 {
	v := s.byteSizeRaw(key, def)
	s.record(key, v)
	return v
}

// byteSizeRaw is ByteSize without recording.
func (s *Section) byteSizeRaw(key string, def int64) int64 {
	v, ok := s.get(key, "byte size")
	if !ok {
		return def
	}
	if n, isInt := toInt64(v); isInt {
		return n
	}
	if str, isStr := v.(string); isStr {
		n, err := ParseByteSize(str)
		if err == nil {
			return n
		}
	}
	s.Bad(key, "want a byte count or a size like \"64MiB\", got %v", v)
	return def
}

// Strings returns a list of strings, or def.
func (s *Section) Strings(key string, def []string) []string {
	v := s.stringsRaw(key, def)
	s.record(key, v)
	return v
}

// stringsRaw is Strings without recording.
func (s *Section) stringsRaw(key string, def []string) []string {
	v, ok := s.get(key, "list of strings")
	if !ok {
		return def
	}
	l, isList := v.([]any)
	if !isList {
		if sl, isSL := v.([]string); isSL {
			return sl
		}
		s.Bad(key, "want a list of strings, got %v", v)
		return def
	}
	out := make([]string, 0, len(l))
	for i, e := range l {
		str, isStr := e.(string)
		if !isStr {
			s.Bad(fmt.Sprintf("%s[%d]", key, i), "want a string, got %v", e)
			continue
		}
		out = append(out, str)
	}
	return out
}

// OneOf returns a string value that must be one of allowed, or def.
func (s *Section) OneOf(key, def string, allowed ...string) string {
	v := s.String(key, def)
	s.probe.enum(key, allowed)
	if !slices.Contains(allowed, v) {
		s.Bad(key, "%q is not one of %s", v, strings.Join(allowed, ", "))
		return def
	}
	return v
}

// Err returns the problems found, plus one per key no getter asked for.
func (s *Section) Err() error {
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		if !s.seen[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	errs := s.errs
	for _, k := range keys {
		errs.Add(k, "unknown key%s", s.suggest(k))
	}
	return errs.Err()
}

// suggest returns " (did you mean K?)" for the key a getter asked for that
// is nearest to an unknown key k (edit distance at most 2), else "".
func (s *Section) suggest(k string) string {
	best, bestD := "", 3
	for _, known := range slices.Sorted(maps.Keys(s.seen)) {
		if d := names.EditDistance(strings.ToLower(k), known, bestD); d < bestD {
			best, bestD = known, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint32:
		return int64(n), true
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n), true
		}
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	}
	return 0, false
}

// ParseByteSize parses a byte count: a non-negative integer, optionally
// followed (spaces allowed) by a unit, case-insensitive: B; KB, MB, GB, TB
// (powers of 1000); KiB, MiB, GiB, TiB (powers of 1024). E.g. "1048576",
// "500KiB", "64MiB", "1GB", "2 GiB".
func ParseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want an integer and a unit like \"64MiB\"", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	var mult int64
	switch strings.ToLower(strings.TrimSpace(t[i:])) {
	case "", "b":
		mult = 1
	case "kb":
		mult = 1000
	case "mb":
		mult = 1000 * 1000
	case "gb":
		mult = 1000 * 1000 * 1000
	case "tb":
		mult = 1000 * 1000 * 1000 * 1000
	case "kib":
		mult = 1 << 10
	case "mib":
		mult = 1 << 20
	case "gib":
		mult = 1 << 30
	case "tib":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s, strings.TrimSpace(t[i:]))
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * mult, nil
}
