package sinks

import (
	"slices"
)

// SectionKey is one key a sink type's section takes, as the type's own
// Factory reads it: the documentation and the JSON Schema of the
// configuration are derived from these, so they cannot drift from the code.
type SectionKey struct {
	Name string
	// Kind is the getter the factory used: "string", "boolean",
	// "integer", "duration", "byte size" or "list of strings".
	Kind string
	// Enum lists the allowed values of a key read with OneOf.
	Enum []string
}

// probeKey marks a section map built by SectionKeysOf. It cannot come from
// a config file: no parser produces a key with a NUL byte from a
// document tracepipe accepts, and its value is a private type.
const probeKey = "\x00tracepipe-section-probe"

// sectionProbe records the keys a factory asks for, in order.
type sectionProbe struct{ keys []SectionKey }

func (p *sectionProbe) record(key, kind string) {
	if p == nil {
		return
	}
	for i := range p.keys {
		if p.keys[i].Name == key {
			if p.keys[i].Kind == "" {
				p.keys[i].Kind = kind
			}
			return
		}
	}
	p.keys = append(p.keys, SectionKey{Name: key, Kind: kind})
}

func (p *sectionProbe) enum(key string, allowed []string) {
	if p == nil {
		return
	}
	p.record(key, "string")
	for i := range p.keys {
		if p.keys[i].Name == key {
			p.keys[i].Enum = slices.Clone(allowed)
		}
	}
}

// SectionKeysOf runs the factory of a registered sink type on an empty,
// marked section and returns every key it read, in the order it read them
// (false: no such type). The factory's verdict on the empty section is
// ignored; factories are pure (no I/O), so this is safe at any time.
func SectionKeysOf(typ string) ([]SectionKey, bool) {
	f, ok := Lookup(typ)
	if !ok {
		return nil, false
	}
	p := &sectionProbe{}
	_, _ = callFactory(f, map[string]any{probeKey: p})
	return p.keys, true
}
