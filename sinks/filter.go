package sinks

import (
	"fmt"
	"reflect"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Packet is what a filter expression sees as the variable `packet`
// (CEL type `sinks.Packet`). All numbers are CEL ints.
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

// passesAlways reports whether a packet passes any filter: TraceStats,
// and packets that carry only a sequence's incremental state
// (interned_data, trace_packet_defaults, or a bare CLEARED: restore
// packets), which the packets a filter keeps may depend on.
func passesAlways(info *tracefile.PacketInfo) bool {
	switch info.PayloadField {
	case tracefile.FieldTraceStats, tracefile.FieldInternedData, tracefile.FieldTracePacketDefaults:
		return true
	case 0:
		return info.SequenceFlags&tracefile.SeqIncrementalStateCleared != 0
	}
	return false
}

// ServiceSequenceID is the trusted_packet_sequence_id of the service's own
// packets.
const ServiceSequenceID = 1

// Filter is a compiled CEL packet filter: a packet is kept when the
// expression evaluates to true.
//
// Packets of the service's own sequence (trusted_packet_sequence_id 1:
// clock snapshots, trace_config, system_info, sync markers, TraceStats)
// always pass, whatever the expression says, so that a filtered file
// stays readable and its losses visible; they are not evaluated. So do
// packets that carry only incremental state (restore packets, interned
// data alone), and a Lane passes the packets an Item marks in Pass.
type Filter struct {
	expr   string
	prg    cel.Program
	native *nativeNode // nil unless the expression lowers (filter_native.go)
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
			cel.Variable("packet", cel.ObjectType("sinks.Packet")),
			cel.CrossTypeNumericComparisons(true),
		)
	})
	return filterEnv, filterEnvErr
}

// NewFilter compiles and type-checks expr, which must yield a bool.
// Errors quote the expression and give the line:column of the problem.
func NewFilter(expr string) (*Filter, error) {
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
	return &Filter{expr: expr, prg: prg, native: lowerFilter(ast.NativeRep().Expr())}, nil
}

// String returns the expression.
func (f *Filter) String() string { return f.expr }

// Match decodes the packet's top-level fields and evaluates the filter.
// TraceStats packets always match. A packet that does not decode, or an
// evaluation error, returns an error (callers keep such packets).
func (f *Filter) Match(packet []byte) (bool, error) {
	info, err := tracefile.DecodePacket(packet)
	if err != nil {
		return true, fmt.Errorf("sinks: filter %q: %w", f.expr, err)
	}
	return f.MatchInfo(&info)
}

// MatchInfo evaluates the filter on an already decoded packet, as a sink
// applies it: service packets and incremental-state packets pass without
// being evaluated.
func (f *Filter) MatchInfo(info *tracefile.PacketInfo) (bool, error) {
	if info.SequenceID == ServiceSequenceID || passesAlways(info) {
		return true, nil
	}
	return f.Eval(info)
}

// Eval evaluates the expression itself on a decoded packet, without the
// sink's pass rules: for tools where the expression is a selection the
// user asked for (protovm apply --filter), not a rule on a trace that
// must stay readable.
func (f *Filter) Eval(info *tracefile.PacketInfo) (bool, error) {
	if f.native != nil {
		return f.native.eval(info), nil
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
