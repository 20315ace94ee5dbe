package sinks

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// SinkTypeFile is the type name of the file sink, registered by this
// package.
const SinkTypeFile = "file"

// Values of the policy keys every sink has.
const (
	WhenFullBlock = "block" // when_full: wait for room (backpressure to readback, never producers)
	WhenFullDrop  = "drop"  // when_full: drop the batch and count it

	OnErrorStop = "stop" // on_error: stop the session gracefully
	OnErrorDrop = "drop" // on_error: count what this sink loses, keep the session going

	FilterErrorKeep = "keep" // filter_error: keep a packet the filter cannot evaluate
	FilterErrorDrop = "drop" // filter_error: drop it (counted in sink_filter_errors and filtered)
)

// DefaultQueueCapacity is the queue of a network sink (relay, NATS) that
// sets no queue_capacity, in output batches (256 KiB each): room for a
// network's stalls.
const DefaultQueueCapacity = 16

// DefaultFileQueueCapacity is the queue of a file sink that sets no
// queue_capacity. A file sink writes locally and, by default, blocks when
// full: then a long queue holds little the ring would not hold, and every
// batch in it is 320 KiB the session keeps resident (a fast stream or a
// slow final read fills all of them). Measured with issue 27's native
// workload (one 64 MiB ring, 2 × 100 MB/s into /dev/shm), peak RSS
// 94.9–95.1 MiB with 16, 92.6–92.8 with 8. A queue of 4 saved 1 MiB more,
// but pipeline's BenchmarkEndToEnd then overwrote data in its lossless
// 1 GB/s case in 2 of 28 runs (0 of 20 with 8, 0 of 30 with 16).
const DefaultFileQueueCapacity = 8

// DefaultQueueFor is the queue of a sink of type typ that sets no
// queue_capacity.
func DefaultQueueFor(typ string) int {
	if typ == SinkTypeFile {
		return DefaultFileQueueCapacity
	}
	return DefaultQueueCapacity
}

// Config describes one sink: the keys every sink has, plus the section of
// its type (`file: {...}`, `relay: {...}`, ...), which the type's Factory
// decodes. For the file sink the section's keys may also be written flat
// (`path`, `compression`, `max_file_size`, `fsync_period`), as before
// sections existed; a key set both ways is an error.
type Config struct {
	Type          string `koanf:"type"`           // a registered sink type (Types)
	Name          string `koanf:"name"`           // label in logs and the summary; default: the destination
	Filter        string `koanf:"filter"`         // CEL expression over `packet`; "" keeps all
	FilterError   string `koanf:"filter_error"`   // keep | drop (default drop)
	QueueCapacity int    `koanf:"queue_capacity"` // batches of 256 KiB; 0 = DefaultQueueFor(Type)
	WhenFull      string `koanf:"when_full"`      // block (default) | drop
	OnError       string `koanf:"on_error"`       // stop | drop; "" = stop for a session's only file sink, else drop

	// Flat file-sink keys (the `file` section's keys, kept working).
	Path        string        `koanf:"path"`
	Compression string        `koanf:"compression"`
	MaxFileSize int64         `koanf:"max_file_size"`
	FsyncPeriod time.Duration `koanf:"fsync_period"`

	// Sections holds `sinks[i].<type>` sections by type name, as decoded
	// from the config file (see DecodeSection).
	Sections map[string]map[string]any `koanf:"-"`
}

// commonKeys are the keys of Config; no sink type may take one as its name.
var commonKeys = []string{"type", "name", "filter", "filter_error", "queue_capacity", "when_full", "on_error",
	"path", "compression", "max_file_size", "fsync_period"}

// DecodeSection stores the section of a registered sink type found under
// key; it reports false for any other key (the caller's "unknown key"). A
// config decoder calls it for keys that are not Config fields.
func (c *Config) DecodeSection(key string, raw map[string]any) bool {
	if _, ok := Lookup(key); !ok {
		return false
	}
	if c.Sections == nil {
		c.Sections = map[string]map[string]any{}
	}
	c.Sections[key] = raw
	return true
}

// SectionKeys lists the stored sections' type names, sorted.
func (c *Config) SectionKeys() []string { return slices.Sorted(maps.Keys(c.Sections)) }

// flatKeys returns the flat file keys that are set, as a section.
func (c Config) flatKeys() map[string]any {
	m := map[string]any{}
	if c.Path != "" {
		m["path"] = c.Path
	}
	if c.Compression != "" {
		m["compression"] = c.Compression
	}
	if c.MaxFileSize != 0 {
		m["max_file_size"] = c.MaxFileSize
	}
	if c.FsyncPeriod != 0 {
		m["fsync_period"] = c.FsyncPeriod
	}
	return m
}

// section returns the type's section with the flat keys merged in (file
// sinks), and the problems of the merge.
func (c Config) section() (map[string]any, map[string]bool, FieldErrors) {
	var errs FieldErrors
	sec := c.Sections[c.Type]
	flat := c.flatKeys()
	fromFlat := map[string]bool{}
	if len(flat) == 0 {
		return sec, fromFlat, nil
	}
	if c.Type != SinkTypeFile {
		for _, k := range slices.Sorted(maps.Keys(flat)) {
			errs.Add(k, "is a file sink key; a %s sink does not take it", c.Type)
		}
		return sec, fromFlat, errs
	}
	merged := maps.Clone(sec)
	if merged == nil {
		merged = map[string]any{}
	}
	for _, k := range slices.Sorted(maps.Keys(flat)) {
		if _, both := merged[k]; both {
			errs.Add(k, "set both here and as file.%s; keep one", k)
			continue
		}
		merged[k] = flat[k]
		fromFlat[k] = true
	}
	return merged, fromFlat, errs
}

// Build checks every key and decodes the type's section, returning the
// type's Builder, or every problem as FieldErrors (paths relative to the
// sink: "queue_capacity", "file.path", or "path" for a flat key). It does
// not touch the file system.
func (c Config) Build() (Builder, error) {
	var errs FieldErrors
	f, ok := Lookup(c.Type)
	switch {
	case c.Type == "":
		errs.Add("type", "missing; want one of %s", strings.Join(Types(), ", "))
	case !ok:
		errs.Add("type", "%q is not a sink type; registered: %s", c.Type, strings.Join(Types(), ", "))
	}
	for _, k := range c.SectionKeys() {
		if k != c.Type {
			errs.Add(k, "a section for a %s sink, but this sink's type is %q", k, c.Type)
		}
	}
	switch c.FilterError {
	case "", FilterErrorKeep, FilterErrorDrop:
	default:
		errs.Add("filter_error", "%q is not keep or drop", c.FilterError)
	}
	switch c.WhenFull {
	case "", WhenFullBlock, WhenFullDrop:
	default:
		errs.Add("when_full", "%q is not block or drop", c.WhenFull)
	}
	switch c.OnError {
	case "", OnErrorStop, OnErrorDrop:
	default:
		errs.Add("on_error", "%q is not stop or drop", c.OnError)
	}
	if c.QueueCapacity < 0 {
		errs.Add("queue_capacity", "%d is negative; want 0 (the default, %d) or a batch count", c.QueueCapacity, DefaultQueueFor(c.Type))
	}
	if c.Filter != "" {
		if _, err := NewFilter(c.Filter); err != nil {
			errs.Add("filter", "%v", err)
		}
	}
	if !ok {
		return nil, errs.Err()
	}
	sec, fromFlat, merr := c.section()
	errs = append(errs, merr...)
	b, err := callFactory(f, sec)
	if err != nil {
		fe, isFE := err.(FieldErrors)
		if !isFE {
			fe = FieldErrors{{Message: err.Error()}}
		}
		// Name the key the user must type: a section's key lives under the
		// type's name (relay.address), whether or not the section was
		// written; only a file sink's flat keys (path) stand alone.
		_, hasSec := c.Sections[c.Type]
		for _, e := range fe {
			first, _, _ := strings.Cut(e.Path, ".")
			first, _, _ = strings.Cut(first, "[")
			flat := fromFlat[first] || c.Type == SinkTypeFile && !hasSec
			if !flat {
				e = FieldErrors{e}.Prefixed(c.Type)[0]
			}
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return b, nil
}

// callFactory runs a factory; a panic is a problem of the section.
func callFactory(f Factory, sec map[string]any) (b Builder, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = FieldErrors{{Message: fmt.Sprintf("the sink factory panicked: %v", r)}}
		}
	}()
	b, err = f(sec)
	if err == nil && b == nil {
		err = FieldErrors{{Message: "the sink factory returned no builder"}}
	}
	return b, err
}

// Validate checks the config (see Build) and returns its problems as
// FieldErrors, or nil.
func (c Config) Validate() error {
	_, err := c.Build()
	return err
}

// New builds the sink of cfg without a session: the destination, wrapped
// by its filter and its queue (a Lane). Logs are discarded.
func New(cfg Config) (Sink, error) {
	return Open(cfg, Env{Now: time.Now()})
}

// TypeHasKey reports whether the section of sink type typ takes key (so
// that a key written beside `type` instead of inside the section can be
// pointed there). It asks the type's factory about a section holding only
// key, unset.
func TypeHasKey(typ, key string) bool {
	f, ok := Lookup(typ)
	if !ok {
		return false
	}
	_, err := callFactory(f, map[string]any{key: nil})
	fe, _ := err.(FieldErrors)
	for _, e := range fe {
		if e.Path == key && strings.HasPrefix(e.Message, "unknown key") {
			return false
		}
	}
	return err == nil || fe != nil
}

// EffectiveSection returns the section of sink type typ with every key its
// factory reads set to the value the sink will use (defaults filled in, as
// a config file would spell them), and ok. Keys the factory does not read
// are kept as they are. When the section has problems (the factory
// reports any, or reads it through something other than Section), it
// returns sec unchanged and false, so that a default never hides a
// mistake.
func EffectiveSection(typ string, sec map[string]any) (map[string]any, bool) {
	f, ok := Lookup(typ)
	if !ok {
		return sec, false
	}
	eff := map[string]any{}
	probe := maps.Clone(sec)
	if probe == nil {
		probe = map[string]any{}
	}
	probe[effectiveKey] = eff
	if _, err := callFactory(f, probe); err != nil || len(eff) == 0 {
		return sec, false
	}
	out := maps.Clone(sec)
	if out == nil {
		out = map[string]any{}
	}
	maps.Copy(out, eff)
	return out, true
}

// SetDefaults fills the keys every sink has with the values the sink will
// use (filter_error drop, when_full block, queue_capacity
// DefaultQueueFor its type, on_error as onError gives it) and, when the sink
// keeps its settings in its type's section and writes no flat file keys,
// the section's own defaults (EffectiveSection). onlyFile tells whether
// this is the session's only file sink: on_error then defaults to stop.
func (c *Config) SetDefaults(onlyFile bool) {
	if c.FilterError == "" {
		c.FilterError = FilterErrorDrop
	}
	if c.WhenFull == "" {
		c.WhenFull = WhenFullBlock
	}
	if c.QueueCapacity == 0 {
		c.QueueCapacity = DefaultQueueFor(c.Type)
	}
	if c.OnError == "" {
		c.OnError = OnErrorDrop
		if onlyFile && c.Type == SinkTypeFile {
			c.OnError = OnErrorStop
		}
	}
	if len(c.flatKeys()) > 0 {
		if c.Type == SinkTypeFile && c.FsyncPeriod == 0 {
			c.FsyncPeriod = DefaultFsyncPeriod
		}
		return
	}
	if sec, ok := c.Sections[c.Type]; ok || c.Type != SinkTypeFile {
		if eff, ok := EffectiveSection(c.Type, sec); ok {
			if c.Sections == nil {
				c.Sections = map[string]map[string]any{}
			}
			c.Sections[c.Type] = eff
		}
	}
}
