package sinks

import (
	"fmt"
	"sync/atomic"

	"github.com/tracepipe/tracepipe/tracefile"
)

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
	expr string
	tree *tracefile.Predicate                     // the expression lowered to Go, or nil
	eval func(tracefile.PacketInfo) (bool, error) // else this evaluates it
}

// FilterCompiler compiles a filter expression to what evaluates it on a
// decoded packet (celfilter.Compile): the expression lowered to a
// tracefile.Predicate, which the filter evaluates itself, or else eval;
// errors quote the expression. eval takes the packet by value, not by
// pointer: a pointer given to a function value escapes, and Match's packet
// would then be allocated on the heap for every packet a filtered sink
// sees.
type FilterCompiler func(expr string) (tree *tracefile.Predicate, eval func(info tracefile.PacketInfo) (bool, error), err error)

var filterCompiler atomic.Pointer[FilterCompiler]

// UseFilterCompiler sets how NewFilter compiles expressions. Programs that
// take filters (tracepipe, its tools) call it with celfilter.Compile at
// start; without it NewFilter refuses every expression, saying so, and
// CEL is not linked in (tracepiped).
func UseFilterCompiler(c FilterCompiler) { filterCompiler.Store(&c) }

// NewFilter compiles and type-checks expr, which must yield a bool.
// Errors quote the expression and give the line:column of the problem.
func NewFilter(expr string) (*Filter, error) {
	c := filterCompiler.Load()
	if c == nil {
		return nil, fmt.Errorf("sinks: filter %q: this program takes no filters (it was built without CEL; tracepipe has it)", expr)
	}
	tree, eval, err := (*c)(expr)
	if err != nil {
		return nil, err
	}
	if tree == nil && eval == nil {
		return nil, fmt.Errorf("sinks: filter %q: the compiler gave nothing to evaluate", expr)
	}
	return &Filter{expr: expr, tree: tree, eval: eval}, nil
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
	if f.tree != nil {
		return f.tree.Eval(info), nil
	}
	return f.eval(*info)
}
