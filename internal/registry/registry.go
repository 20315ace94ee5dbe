// Package registry is the name → factory table that sink types (sinks)
// and data sources (plugins) register into from init functions. It owns
// the locking, the duplicate check and the sorted listing; what a factory
// is, and which names are allowed, belong to the package that uses it.
package registry

import (
	"fmt"
	"slices"
	"sync"
)

// Registry maps names to factories of type F. The zero value is not
// usable; call New.
type Registry[F any] struct {
	what string // names an entry in panics: "sinks: sink type"
	mu   sync.RWMutex
	m    map[string]F
}

// New returns an empty registry; what names its entries in panics
// ("plugins: data source").
func New[F any](what string) *Registry[F] {
	return &Registry[F]{what: what, m: map[string]F{}}
}

// Register adds f under name. A duplicate name panics: it is a programming
// error caught at init time.
func (r *Registry[F]) Register(name string, f F) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[name]; dup {
		panic(fmt.Sprintf("%s %q registered twice", r.what, name))
	}
	r.m[name] = f
}

// Lookup returns the factory registered under name.
func (r *Registry[F]) Lookup(name string) (F, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f, ok := r.m[name]
	return f, ok
}

// Names lists the registered names, sorted.
func (r *Registry[F]) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.m))
	for k := range r.m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
