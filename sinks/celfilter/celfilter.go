// Package celfilter compiles the filter of a sink section (filter:, and
// protovm apply --filter): a CEL expression over the variable packet, the
// decoded top-level fields of a TracePacket (Packet), to a function that
// evaluates it (sinks.Filter calls it). Filters made only of comparisons
// between a field and a literal are lowered to a small tree evaluated in
// Go (native.go); the rest run in CEL. It owns the expression's
// environment, its type checks and the hints for misspelt packet kinds.
//
// It is apart from package sinks so that a program that takes no
// filters, tracepiped, does not link CEL: the programs that do hand
// Compile to sinks.UseFilterCompiler. It must not import package sinks
// (whose tests use it), and it must not decide which packets pass
// without evaluation (service packets, incremental state): sinks.Filter
// does.
package celfilter

import (
	"fmt"
	"reflect"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Packet is what a filter expression sees as the variable `packet`
// (CEL type `celfilter.Packet`). All numbers are CEL ints.
//
//	packet.timestamp                 int     TracePacket.timestamp (0 when absent)
//	packet.has_timestamp             bool
//	packet.timestamp_clock_id        int
//	packet.sequence_id               int     trusted_packet_sequence_id (1 = service)
//	packet.size                      int     encoded size in bytes
//	packet.kind                      string  payload field name: "track_event", "process_tree",
//	                                         "sys_stats", "trace_stats", "clock_snapshot", ...,
//	                                         "field_<n>" if unknown, "" if none
//	packet.trusted_pid               int     0 when absent
//	packet.trusted_uid               int     0 when absent
//	packet.machine_id                int
//	packet.previous_packet_dropped   int     loss bitmask (0 = no loss)
//	packet.first_packet_on_sequence  bool
//	packet.sequence_flags            int
//
// Example: `packet.kind == "track_event" && packet.sequence_id != 3`.
type Packet struct {
	Timestamp             int64  `cel:"timestamp"`
	HasTimestamp          bool   `cel:"has_timestamp"`
	TimestampClockID      int64  `cel:"timestamp_clock_id"`
	SequenceID            int64  `cel:"sequence_id"`
	Size                  int64  `cel:"size"`
	Kind                  string `cel:"kind"`
	TrustedPID            int64  `cel:"trusted_pid"`
	TrustedUID            int64  `cel:"trusted_uid"`
	MachineID             int64  `cel:"machine_id"`
	PreviousPacketDropped int64  `cel:"previous_packet_dropped"`
	FirstPacketOnSequence bool   `cel:"first_packet_on_sequence"`
	SequenceFlags         int64  `cel:"sequence_flags"`
}

// program is a compiled filter.
type program struct {
	expr   string
	prg    cel.Program
	native *tracefile.Predicate // nil unless the expression lowers (native.go)
}

var (
	filterEnvOnce sync.Once
	filterEnv     *cel.Env
	filterEnvErr  error
)

func env() (*cel.Env, error) {
	filterEnvOnce.Do(func() {
		filterEnv, filterEnvErr = cel.NewEnv(
			ext.NativeTypes(reflect.TypeFor[Packet](), ext.ParseStructTags(true)),
			cel.Variable("packet", cel.ObjectType("celfilter.Packet")),
			cel.CrossTypeNumericComparisons(true),
		)
	})
	return filterEnv, filterEnvErr
}

// Compile compiles and type-checks expr, which must yield a bool, and
// returns what evaluates it on a decoded packet (sinks.Filter's Eval):
// the expression lowered to a tracefile.Predicate when it lowers (native.go),
// else nil and eval, which runs it in CEL. Errors quote the expression and
// give the line:column of the problem.
func Compile(expr string) (tree *tracefile.Predicate, eval func(tracefile.PacketInfo) (bool, error), err error) {
	p, err := compile(expr)
	if err != nil {
		return nil, nil, err
	}
	if p.native != nil {
		return p.native, nil, nil
	}
	return nil, p.eval, nil
}

// compile is Compile's program, which the tests look into.
func compile(expr string) (*program, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("sinks: filter environment: %w", err)
	}
	ast, iss := e.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("sinks: filter %q: %w", expr, iss.Err())
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("sinks: filter %q: result type is %s, want bool", expr, ast.OutputType())
	}
	if err := checkKindLiterals(ast.NativeRep().Expr()); err != nil {
		return nil, fmt.Errorf("sinks: filter %q: %w", expr, err)
	}
	prg, err := e.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("sinks: filter %q: %w", expr, err)
	}
	return &program{expr: expr, prg: prg, native: lowerFilter(ast.NativeRep().Expr())}, nil
}

// eval evaluates the expression on a decoded packet.
func (f *program) eval(info tracefile.PacketInfo) (bool, error) {
	if f.native != nil {
		return f.native.Eval(&info), nil
	}
	p := &Packet{
		Timestamp:             int64(info.Timestamp),
		HasTimestamp:          info.HasTimestamp,
		TimestampClockID:      int64(info.TimestampClockID),
		SequenceID:            int64(info.SequenceID),
		Size:                  int64(info.Size),
		Kind:                  info.Kind(),
		TrustedPID:            int64(info.TrustedPID),
		TrustedUID:            int64(info.TrustedUID),
		MachineID:             int64(info.MachineID),
		PreviousPacketDropped: int64(info.PreviousPacketDropped),
		FirstPacketOnSequence: info.FirstPacketOnSequence,
		SequenceFlags:         int64(info.SequenceFlags),
	}
	out, _, err := f.prg.Eval(map[string]any{"packet": p})
	if err != nil {
		return true, fmt.Errorf("sinks: filter %q: evaluating: %w", f.expr, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return true, fmt.Errorf("sinks: filter %q: result %v is not a bool", f.expr, out)
	}
	return b, nil
}
