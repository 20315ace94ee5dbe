// Package tracebuild builds small TracePackets and traces by field number
// for tests: hand-made traces that reproduce what trace_processor does with
// a given shape (reference/trace-processor-import.md §8). It owns no
// format knowledge beyond the field numbers of reference/trace-format.md
// and must not be used to write production traces (tracefile owns that).
package tracebuild

import (
	"math/rand/v2"
	"strings"

	"github.com/tracepipe/tracepipe/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Field appends one or more fields to a message.
type Field func([]byte) []byte

// Message encodes fields in order.
func Message(fields ...Field) []byte {
	var b []byte
	for _, f := range fields {
		b = f(b)
	}
	return b
}

// Packet is Message, named for readability.
func Packet(fields ...Field) []byte { return Message(fields...) }

// Trace frames packets as a Trace (field 1 each).
func Trace(packets ...[]byte) []byte {
	var b []byte
	for _, p := range packets {
		b = tracefile.AppendRecord(b, p)
	}
	return b
}

// Varint is a varint field.
func Varint(num protowire.Number, v uint64) Field {
	return func(b []byte) []byte {
		return wire.AppendVarint(b, num, v)
	}
}

// Bytes is a length-delimited field.
func Bytes(num protowire.Number, v []byte) Field {
	return func(b []byte) []byte {
		return wire.AppendBytes(b, num, v)
	}
}

// String is a string field.
func String(num protowire.Number, s string) Field { return Bytes(num, []byte(s)) }

// Sub is a nested message field.
func Sub(num protowire.Number, fields ...Field) Field { return Bytes(num, Message(fields...)) }

// TracePacket header fields.
func Seq(id uint32) Field              { return Varint(tracefile.FieldTrustedSequenceID, uint64(id)) }
func Flags(f uint32) Field             { return Varint(tracefile.FieldSequenceFlags, uint64(f)) }
func Ts(t uint64) Field                { return Varint(tracefile.FieldTimestamp, t) }
func ClockID(id uint32) Field          { return Varint(tracefile.FieldTimestampClockID, uint64(id)) }
func Loss(bits uint32) Field           { return Varint(tracefile.FieldPreviousPacketDropped, uint64(bits)) }
func UID(uid int32) Field              { return Varint(tracefile.FieldTrustedUID, uint64(int64(uid))) }
func MachineID(id uint32) Field        { return Varint(tracefile.FieldMachineID, uint64(id)) }
func ForTesting(p []byte) Field        { return Bytes(tracefile.FieldForTesting, p) }
func TrackDescriptor(f ...Field) Field { return Sub(tracefile.FieldTrackDescriptor, f...) }

// Sequence flags.
const (
	Cleared = 1 // SEQ_INCREMENTAL_STATE_CLEARED
	Needs   = 2 // SEQ_NEEDS_INCREMENTAL_STATE
)

// Interned is interned_data with the given entries (EventName/Category).
func Interned(entries ...Field) Field { return Sub(tracefile.FieldInternedData, entries...) }

// EventName is an InternedData.event_names entry.
func EventName(iid uint64, name string) Field { return Sub(2, Varint(1, iid), String(2, name)) }

// EventCategory is an InternedData.event_categories entry.
func EventCategory(iid uint64, name string) Field { return Sub(1, Varint(1, iid), String(2, name)) }

// TrackEvent types.
const (
	SliceBegin = 1
	SliceEnd   = 2
	Instant    = 3
	Counter    = 4
)

// Event is a track_event of type typ on uuid (0: no track_uuid) with
// name_iid (0: none) and more fields.
func Event(typ uint64, uuid uint64, nameIID uint64, more ...Field) Field {
	f := []Field{Varint(9, typ)}
	if uuid != 0 {
		f = append(f, Varint(11, uuid))
	}
	if nameIID != 0 {
		f = append(f, Varint(10, nameIID))
	}
	return Sub(tracefile.FieldTrackEvent, append(f, more...)...)
}

// CounterValue is TrackEvent.counter_value.
func CounterValue(v int64) Field { return Varint(30, uint64(v)) }

// Descriptor is a track_descriptor with uuid and name; counter makes it a
// counter track.
func Descriptor(uuid uint64, name string, counter bool) Field {
	f := []Field{Varint(1, uuid), String(2, name)}
	if counter {
		f = append(f, Bytes(8, nil))
	}
	return TrackDescriptor(f...)
}

// Clock is a ClockSnapshot.Clock.
type Clock struct {
	ID uint32
	Ts uint64
}

// Snapshot is a clock_snapshot; primary 0 leaves primary_trace_clock out.
func Snapshot(primary uint32, clocks ...Clock) Field {
	var f []Field
	for _, c := range clocks {
		f = append(f, Sub(1, Varint(1, uint64(c.ID)), Varint(2, c.Ts)))
	}
	if primary != 0 {
		f = append(f, Varint(2, uint64(primary)))
	}
	return Sub(tracefile.FieldClockSnapshot, f...)
}

// Config describes the trace_config fields trace_processor evaluates.
type Config struct {
	WriteIntoFile     bool
	FileWritePeriodMs uint64
	FlushPeriodMs     uint64
	FillPolicies      []uint64 // per buffer: 1 RING_BUFFER, 2 DISCARD
}

// TraceConfig is a trace_config packet field.
func TraceConfig(c Config) Field {
	var f []Field
	for _, p := range c.FillPolicies {
		f = append(f, Sub(1, Varint(1, 1024), Varint(4, p)))
	}
	if c.WriteIntoFile {
		f = append(f, Varint(8, 1), Varint(9, c.FileWritePeriodMs))
	}
	if c.FlushPeriodMs != 0 {
		f = append(f, Varint(13, c.FlushPeriodMs))
	}
	return Sub(tracefile.FieldTraceConfig, f...)
}

// SystemInfo is system_info with tracing_service_version.
func SystemInfo(version string) Field {
	return Sub(tracefile.FieldSystemInfo, String(4, version))
}

// TraceStats is a trace_stats field holding ts.
func TraceStats(ts *tracefile.TraceStats) Field {
	return func(b []byte) []byte { return tracefile.AppendTraceStats(b, ts) }
}

// Provenance is trace_provenance with one buffer listing (sequence,
// producer) pairs.
func Provenance(pairs ...[2]uint32) Field {
	var seqs []Field
	for _, p := range pairs {
		seqs = append(seqs, Sub(1, Varint(1, uint64(p[0])), Varint(2, uint64(p[1]))))
	}
	return Sub(tracefile.FieldTraceProvenance, Sub(2, seqs...))
}

// ProtoVMs is a protovms packet field with one instance; state nil leaves
// the state out.
func ProtoVMs(program, state []byte, memoryKB uint32, producers ...uint32) Field {
	f := []Field{Bytes(1, program)}
	if state != nil {
		f = append(f, Bytes(2, state))
	}
	f = append(f, Varint(3, uint64(memoryKB)))
	for _, p := range producers {
		f = append(f, Varint(4, uint64(p)))
	}
	return Sub(tracefile.FieldProtoVMs, Sub(1, f...))
}

// C is a Clock.
func C(id uint32, ts uint64) Clock { return Clock{ID: id, Ts: ts} }

// millis is a millisecond in nanoseconds.
const millis = 1_000_000

// InterningTrace is a lossless trace of n producer packets in the synthetic source's shape: three
// sequences; each starts (and every 150 packets restarts) with a CLEARED
// packet carrying its track descriptor; events are NEEDS packets that
// intern their name on first use since the last CLEARED, padded to random
// sizes so chunks fill unevenly. Packets stay below a chunk, so nothing
// is fragmented.
func InterningTrace(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	pkts := [][]byte{Packet(Seq(1), Snapshot(6, C(6, 1000*millis), C(3, 900*millis)))}
	count := map[uint32]int{}
	interned := map[uint32]map[uint64]bool{}
	for i := 0; i < n; i++ {
		seq := uint32(2 + rng.IntN(3))
		j := count[seq]
		count[seq]++
		ts := Ts(uint64(1000*millis + i))
		who := []Field{Seq(seq), UID(1000), Varint(tracefile.FieldTrustedPID, uint64(seq))}
		if j%150 == 0 {
			interned[seq] = map[uint64]bool{}
			pkts = append(pkts, Packet(append(who, ts, Flags(Cleared), Descriptor(uint64(seq)*10, "t", false))...))
			continue
		}
		iid := uint64(j%37 + 1)
		f := append(who, ts, Flags(Needs))
		if !interned[seq][iid] {
			interned[seq][iid] = true
			f = append(f, Interned(EventName(iid, "event_"+strings.Repeat("x", int(iid)))))
		}
		pad := strings.Repeat("p", 20+rng.IntN(400))
		f = append(f, Event(Instant, uint64(seq)*10, iid, Sub(4, String(10, "pad"), String(6, pad))))
		pkts = append(pkts, Packet(f...))
	}
	return Trace(pkts...)
}
