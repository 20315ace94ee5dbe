package sinks

import (
	"context"
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

// Filter is a compiled CEL packet filter: a packet is kept when the
// expression evaluates to true.
//
// TraceStats packets always pass, whatever the expression says, so that
// losses stay visible in the trace; they are not evaluated.
type Filter struct {
	expr string
	prg  cel.Program
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
	prg, err := e.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("sinks: filter %q: %w", expr, err)
	}
	return &Filter{expr: expr, prg: prg}, nil
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

// MatchInfo evaluates the filter on an already decoded packet.
func (f *Filter) MatchInfo(info *tracefile.PacketInfo) (bool, error) {
	if info.PayloadField == tracefile.FieldTraceStats {
		return true, nil
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

// FilteredSink passes to the wrapped sink only the packets its filter
// keeps, and counts the others in SinkStats.PacketsFiltered.
type FilteredSink struct {
	next   Sink
	filter *Filter

	mu    sync.Mutex // guards kept and stats; serialises Write
	kept  [][]byte
	stats SinkStats
}

var _ Sink = (*FilteredSink)(nil)

// Filtered wraps sink with f. Packets the filter rejects are counted, not
// silently lost; packets it cannot evaluate are kept and counted in
// FilterErrors; TraceStats packets always pass.
func Filtered(sink Sink, f *Filter) *FilteredSink {
	return &FilteredSink{next: sink, filter: f}
}

// Write filters packets and writes the kept ones.
func (s *FilteredSink) Write(ctx context.Context, packets [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept = s.kept[:0]
	for _, p := range packets {
		ok, err := s.filter.Match(p)
		if err != nil {
			s.stats.FilterErrors++
		}
		if ok {
			s.kept = append(s.kept, p)
			continue
		}
		s.stats.PacketsFiltered++
		s.stats.BytesFiltered += uint64(len(p))
	}
	if len(s.kept) == 0 {
		return nil
	}
	err := s.next.Write(ctx, s.kept)
	clear(s.kept) // do not pin the caller's buffers
	return err
}

// Flush flushes the wrapped sink.
func (s *FilteredSink) Flush(ctx context.Context) error { return s.next.Flush(ctx) }

// Close closes the wrapped sink.
func (s *FilteredSink) Close(ctx context.Context) error { return s.next.Close(ctx) }

// Stats returns the wrapped sink's counters plus the filter's.
func (s *FilteredSink) Stats() SinkStats {
	inner := s.next.Stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	return inner.Add(s.stats)
}
