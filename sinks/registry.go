package sinks

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tracepipe/tracepipe/internal/registry"
)

// FieldError is one problem with a sink's configuration: the key path,
// relative to the place the error is reported from ("path",
// "file.max_file_size", "queue_capacity"), and what is wrong. Callers
// above prefix the path (the pipeline adds "sinks[i]."); nobody parses the
// message.
type FieldError struct {
	Path    string
	Message string
}

func (e FieldError) Error() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// FieldErrors is every problem found in one configuration, in key order.
// A nil FieldErrors is no problem; use [FieldErrors.Err] to return it as
// an error so that a nil slice becomes a nil error.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Err returns es as an error, or nil when es is empty.
func (es FieldErrors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Add appends a problem at path.
func (es *FieldErrors) Add(path, format string, args ...any) {
	*es = append(*es, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Prefixed returns es with prefix joined in front of every path
// (prefix "file" turns "path" into "file.path").
func (es FieldErrors) Prefixed(prefix string) FieldErrors {
	out := make(FieldErrors, len(es))
	for i, e := range es {
		out[i] = e
		switch {
		case prefix == "":
		case e.Path == "":
			out[i].Path = prefix
		default:
			out[i].Path = prefix + "." + e.Path
		}
	}
	return out
}

// Factory decodes the configuration section of one sink type (the map
// under `sinks[i].<type>`, values as the config file typed them: strings,
// bools, ints, floats, maps, lists; time.Duration and int64 are accepted
// too) and returns a Builder for it.
//
// Problems are returned as FieldErrors whose paths are relative to the
// section ("path", not "sinks[0].file.path"); any other error is reported
// against the section as a whole. A Factory must be pure: no I/O, no
// goroutines — it runs when a config is validated, which may happen
// without a session ever starting.
type Factory func(section map[string]any) (Builder, error)

// Builder is a decoded sink section, ready to open.
type Builder interface {
	// Destination names where packets go, for summaries and logs: a file
	// path, "nats://host:4222 subject", "relay tcp://host:port", ...
	Destination() string
	// Open creates the destination and returns the sink. It is called once,
	// when the session starts.
	Open(env Env) (Sink, error)
}

// Env is what a session tells a sink when opening it.
type Env struct {
	// Expand replaces placeholders of a destination name beyond the ones
	// ExpandName knows; nil adds none.
	Expand func(string) string
	// SessionUUID identifies the tracing session (the trace_uuid packet's
	// value), for sinks that label what they send.
	SessionUUID [16]byte
	// Now is the session's start time.
	Now time.Time
	// Logger receives the sink's warnings; nil discards them.
	Logger *slog.Logger
	// Rotatable asks file sinks to be able to rotate on demand
	// (FileSink.Rotate: rotate_period, `tracepipe rotate`).
	Rotatable bool
	// KeepGoing is set when the sink's on_error is drop (OpenLane sets
	// it from the Config): a sink that can recover from a failure on its
	// own (a file sink on a full file system) then tries to.
	KeepGoing bool
	// Snapshot, when not zero, opens the sink for one clone snapshot of
	// the session Snapshot.Of (SessionUUID is then the snapshot's own);
	// network sinks tell their receiver (see [Snapshot]). A sink type
	// whose destination cannot keep a second trace apart from the live
	// one must fail Open when it is set (that snapshot then fails for it).
	Snapshot Snapshot
}

func (e Env) expand(s string) string { return e.expandN(s, 0) }

// expandN is ExpandName with attempt n, then Expand.
func (e Env) expandN(s string, n int) string {
	s = ExpandName(s, e.Now, n)
	if e.Expand != nil {
		s = e.Expand(s)
	}
	return s
}

// TimestampLayout is how {timestamp} is written: local time to the
// millisecond, e.g. 20261124-011409.123.
const TimestampLayout = "20060102-150405.000"

// ExpandName replaces {timestamp} (now, TimestampLayout) and {pid} in a
// destination name. Attempt n > 0 appends "-n" to the timestamp: a sink
// that finds the name taken tries the next attempt, so two sessions
// started in the same millisecond never collide.
func ExpandName(name string, now time.Time, n int) string {
	ts := now.Format(TimestampLayout)
	if n > 0 {
		ts += "-" + strconv.Itoa(n)
	}
	return strings.NewReplacer("{timestamp}", ts, "{pid}", strconv.Itoa(os.Getpid())).Replace(name)
}

var factories = registry.New[Factory]("sinks: sink type")

// Register makes a sink type available as `type: name` with its section
// `sinks[i].<name>: {...}`. It panics on an empty name, a nil factory, a
// name already registered, or a name that is one of the keys every sink
// shares (see [Config]); call it from an init function.
func Register(name string, f Factory) {
	if name == "" || f == nil {
		panic("sinks: Register with an empty name or a nil factory")
	}
	if slices.Contains(commonKeys, name) {
		panic(fmt.Sprintf("sinks: Register(%q): the name is a common sink key", name))
	}
	factories.Register(name, f)
}

// Lookup returns the factory of a registered sink type.
func Lookup(name string) (Factory, bool) { return factories.Lookup(name) }

// Types lists the registered sink types, sorted.
func Types() []string { return factories.Names() }
