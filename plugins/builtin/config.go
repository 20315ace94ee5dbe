package builtin

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
)

// configReader reads one data source's config map. Every problem is
// collected, and err reports them all at once, each message starting with
// the key name relative to the per-source config (the pipeline prefixes
// "data_sources[i].config.").
//
// Usage: declare every key by reading it (intKey, boolKey) in the order the
// source documents them, then call err. Keys present in the map but never
// read are reported as unknown, with a suggestion when one is close.
type configReader struct {
	m    map[string]any
	read map[string]bool
	keys []string // known keys, in declaration order
	errs []error
}

func newConfigReader(m map[string]any) *configReader {
	return &configReader{m: m, read: make(map[string]bool, 8)}
}

func (r *configReader) addf(key, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
}

func (r *configReader) lookup(key string) (any, bool) {
	r.read[key] = true
	r.keys = append(r.keys, key)
	v, ok := r.m[key]
	return v, ok
}

// intKey returns the integer under key, or def when absent. check, if not
// nil, returns a problem description (e.g. "must be >= 0") for a value out
// of range; the value is then reported as "key: <problem>, got <value>" and
// def is returned.
func (r *configReader) intKey(key string, def int64, check func(int64) string) int64 {
	v, ok := r.lookup(key)
	if !ok {
		return def
	}
	n, problem := toInt64(v)
	if problem != "" {
		r.addf(key, "%s", problem)
		return def
	}
	if check != nil {
		if p := check(n); p != "" {
			r.addf(key, "%s, got %d", p, n)
			return def
		}
	}
	return n
}

// boolKey returns the bool under key, or def when absent.
func (r *configReader) boolKey(key string, def bool) bool {
	v, ok := r.lookup(key)
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		r.addf(key, "must be a bool, got %s", describe(v))
		return def
	}
	return b
}

// err reports unknown keys (sorted, each with a suggestion when a known key
// is close) followed by the problems of known keys in declaration order.
func (r *configReader) err() error {
	var unknown []string
	for k := range r.m {
		if !r.read[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	all := make([]error, 0, len(unknown)+len(r.errs))
	for _, k := range unknown {
		if s := suggest(k, r.keys); s != "" {
			all = append(all, fmt.Errorf("%s: unknown key (did you mean %s?)", k, s))
		} else {
			all = append(all, fmt.Errorf("%s: unknown key (known keys: %s)", k, strings.Join(r.keys, ", ")))
		}
	}
	all = append(all, r.errs...)
	return errors.Join(all...)
}

// Range checks shared by the sources.

func atLeast(lo int64) func(int64) string {
	return func(n int64) string {
		if n < lo {
			return fmt.Sprintf("must be >= %d", lo)
		}
		return ""
	}
}

func between(lo, hi int64) func(int64) string {
	return func(n int64) string {
		if n < lo || n > hi {
			return fmt.Sprintf("must be between %d and %d", lo, hi)
		}
		return ""
	}
}

// offOrAtLeast accepts 0 (the feature is off) or any value >= lo.
func offOrAtLeast(lo int64) func(int64) string {
	return func(n int64) string {
		if n != 0 && n < lo {
			return fmt.Sprintf("must be 0 (off) or >= %d", lo)
		}
		return ""
	}
}

// toInt64 converts the numeric forms a decoded config may hold (Go ints and
// uints from YAML/TOML, float64 from JSON, json.Number) into an int64. It
// returns a problem description for anything else or for a value that is
// not an integer representable as int64.
func toInt64(v any) (int64, string) {
	switch x := v.(type) {
	case int:
		return int64(x), ""
	case int8:
		return int64(x), ""
	case int16:
		return int64(x), ""
	case int32:
		return int64(x), ""
	case int64:
		return x, ""
	case uint:
		return uintToInt64(uint64(x))
	case uint8:
		return int64(x), ""
	case uint16:
		return int64(x), ""
	case uint32:
		return int64(x), ""
	case uint64:
		return uintToInt64(x)
	case float32:
		return floatToInt64(float64(x))
	case float64:
		return floatToInt64(x)
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, ""
		}
		if f, err := x.Float64(); err == nil {
			return floatToInt64(f)
		}
		return 0, fmt.Sprintf("must be an integer, got %s", x.String())
	}
	return 0, "must be an integer, got " + describe(v)
}

func uintToInt64(u uint64) (int64, string) {
	if u > math.MaxInt64 {
		return 0, fmt.Sprintf("must be an integer <= %d, got %d", int64(math.MaxInt64), u)
	}
	return int64(u), ""
}

func floatToInt64(f float64) (int64, string) {
	// 2^63 is exactly representable; every float below it converts safely.
	if f != math.Trunc(f) || math.IsInf(f, 0) || f >= 1<<63 || f < -(1<<63) {
		return 0, fmt.Sprintf("must be an integer, got %v", f)
	}
	return int64(f), ""
}

// describe renders a config value of the wrong type for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("bool %v", x)
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, json.Number:
		return fmt.Sprintf("number %v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("%T", v)
}

// suggest returns the known key closest to k (case-insensitive optimal
// string alignment distance at most 2, or at most a third of the key's
// length for long keys), or "".
func suggest(k string, known []string) string {
	best, bestD := "", math.MaxInt
	lk := strings.ToLower(k)
	for _, c := range known {
		d := osaDistance(lk, strings.ToLower(c))
		limit := max(2, len(c)/3)
		if d <= limit && d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// osaDistance is the optimal string alignment distance (Levenshtein plus
// transposition of adjacent bytes).
func osaDistance(a, b string) int {
	// Three rows: i-2, i-1, i.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
