package config

import (
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/knadh/koanf/providers/env/v2"
)

// envOverrides turns the TRACEPIPE_* entries of environ into overrides,
// ordered so that list elements are appended in index order. A variable is
// config only when the first part of its name is a top-level key
// (TRACEPIPE_DURATION, TRACEPIPE_BUFFERS__0__SIZE_KB); any other
// TRACEPIPE_* variable belongs to something else (a test harness, a
// wrapper script) and is ignored, with a warning naming it, so that it
// cannot break a command.
func envOverrides(environ []string, warn func(string)) []override {
	top := fieldsOf(reflect.TypeFor[Config]())
	// koanf's env provider picks the TRACEPIPE_* variables (names kept as
	// they are: the paths are split below, "__" per level).
	vars, err := env.Provider("", env.Opt{Prefix: EnvPrefix, EnvironFunc: func() []string { return environ }}).Read()
	if err != nil { // it reads a slice; it has no error of its own to give
		return nil
	}
	// Walk the variables in the environment's order, so that warnings
	// come out the same way every run.
	var out []override
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		v, ok := vars[name]
		if !ok {
			continue
		}
		delete(vars, name) // a name set twice counts once, as koanf kept it
		val, _ := v.(string)
		o := override{source: name, value: parseScalar(val)}
		for part := range strings.SplitSeq(strings.ToLower(strings.TrimPrefix(name, EnvPrefix)), "__") {
			if n, err := strconv.Atoi(part); err == nil && n >= 0 && part[0] != '+' {
				o.path = append(o.path, pathSeg{index: n, isIndex: true})
			} else {
				o.path = append(o.path, pathSeg{key: part})
			}
		}
		if !isTopLevelKey(o.path[0], top) {
			if warn != nil {
				hint := ""
				if !o.path[0].isIndex && o.path[0].key != "" {
					if s := suggest(o.path[0].key, top); s != "" {
						hint = s
					}
				}
				warn(name + " is not a config variable (its name after " + EnvPrefix +
					" starts with no top-level config key" + hint + "); ignored")
			}
			continue
		}
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return lessPath(out[i].path, out[j].path, out[i].source, out[j].source) })
	return out
}

func isTopLevelKey(s pathSeg, top []field) bool {
	if s.isIndex {
		return false
	}
	for _, f := range top {
		if f.key == s.key {
			return true
		}
	}
	return false
}

// attributeEnv appends "(set by TRACEPIPE_X)" to the problems found at or
// below a path an environment variable set, so that a user who never wrote
// that key in the file learns where it came from.
func attributeEnv(problems []Problem, envs []override) []Problem {
	for i := range problems {
		for _, o := range envs {
			p := overridePath(o.path)
			if problems[i].Path == p || strings.HasPrefix(problems[i].Path, p+".") || strings.HasPrefix(problems[i].Path, p+"[") {
				problems[i].Message += " (set by " + o.source + ")"
				break
			}
		}
	}
	return problems
}

// overridePath renders an override path the way problems name fields:
// "buffers[0].size_kb".
func overridePath(path []pathSeg) string {
	var p string
	for _, s := range path {
		if s.isIndex {
			p += "[" + strconv.Itoa(s.index) + "]"
		} else {
			p = joinPath(p, s.key)
		}
	}
	return p
}

// AttributeEnv is attributeEnv with the TRACEPIPE_ overrides Load applied
// to c: for problems found outside this package (a plugin's own check).
func (c *Config) AttributeEnv(problems []Problem) []Problem {
	return attributeEnv(problems, c.envs)
}
