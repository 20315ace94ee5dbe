package tracefile

import (
	"github.com/tracepipe/tracepipe/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// Clock is one ClockSnapshot.Clock (trace-format.md §5).
type Clock struct {
	ID               uint32 // clock_id 1: BuiltinClock 1..63 or sequence-scoped 64..127
	Timestamp        uint64 // timestamp 2
	IsIncremental    bool   // is_incremental 3, written only when true
	UnitMultiplierNs uint64 // unit_multiplier_ns 4, written only when non-zero
}

// BuiltinClock values (trace-format.md §5).
const (
	ClockRealtime        = 1
	ClockRealtimeCoarse  = 2
	ClockMonotonic       = 3
	ClockMonotonicCoarse = 4
	ClockMonotonicRaw    = 5
	ClockBoottime        = 6
)

// AppendClockSnapshot appends a clock_snapshot (6) payload:
// ClockSnapshot{clocks 1 (repeated), primary_trace_clock 2}. primary 0 is
// not written.
func AppendClockSnapshot(dst []byte, clocks []Clock, primary uint32) []byte {
	return wire.AppendNested(dst, FieldClockSnapshot, func(b []byte) []byte {
		for _, c := range clocks {
			b = wire.AppendNested(b, 1, func(b []byte) []byte {
				b = wire.AppendVarint(b, 1, uint64(c.ID))
				b = wire.AppendVarint(b, 2, c.Timestamp)
				if c.IsIncremental {
					b = wire.AppendBool(b, 3, true)
				}
				if c.UnitMultiplierNs != 0 {
					b = wire.AppendVarint(b, 4, c.UnitMultiplierNs)
				}
				return b
			})
		}
		if primary != 0 {
			b = wire.AppendVarint(b, 2, uint64(primary))
		}
		return b
	})
}

// ProvenanceSequence is one (producer, writer) sequence that wrote into a
// buffer: TraceProvenance.Buffer.Sequence{id 1, producer_id 2}.
type ProvenanceSequence struct {
	ID         uint32 // trusted_packet_sequence_id given to the writer
	ProducerID int32
}

// AppendTraceProvenance appends a trace_provenance (124) payload:
// TraceProvenance{buffers 2: one Buffer{sequences 1} per session buffer, in
// config order}.
func AppendTraceProvenance(dst []byte, buffers [][]ProvenanceSequence) []byte {
	return wire.AppendNested(dst, FieldTraceProvenance, func(b []byte) []byte {
		for _, seqs := range buffers {
			b = wire.AppendNested(b, 2, func(b []byte) []byte {
				for _, s := range seqs {
					b = wire.AppendNested(b, 1, func(b []byte) []byte {
						b = wire.AppendVarint(b, 1, uint64(s.ID))
						return wire.AppendInt32(b, 2, s.ProducerID)
					})
				}
				return b
			})
		}
		return b
	})
}

// AppendTraceUUID appends a trace_uuid (89) payload: TraceUuid{msb 1, lsb 2}.
func AppendTraceUUID(dst []byte, msb, lsb int64) []byte {
	return wire.AppendNested(dst, FieldTraceUUID, func(b []byte) []byte {
		b = wire.AppendVarint(b, 1, uint64(msb))
		return wire.AppendVarint(b, 2, uint64(lsb))
	})
}

// SyncMarker is the 16-byte synchronization_marker the service emits.
var SyncMarker = [16]byte{0x82, 0x47, 0x7a, 0x76, 0xb2, 0x8d, 0x42, 0xba, 0x81, 0xdc, 0x33, 0x32, 0x6d, 0x57, 0xa0, 0x79}

// AppendSyncMarkerPacket appends a whole sync-marker packet: unlike other
// service packets it carries only trusted_uid, sequence id 1 and the marker,
// marker last.
func AppendSyncMarkerPacket(dst []byte, serviceUID int32) []byte {
	dst = wire.AppendInt32(dst, FieldTrustedUID, serviceUID)
	dst = wire.AppendVarint(dst, FieldTrustedSequenceID, serviceSequenceID)
	return wire.AppendBytes(dst, FieldSynchronizationMarker, SyncMarker[:])
}

// TracingServiceEvent event_type fields (trace-format.md §7). Each is a
// bool set to true in its own packet, except BufferCloned (a buffer index).
const (
	EventAllDataSourcesStarted       = 1
	EventTracingStarted              = 2
	EventAllDataSourcesFlushed       = 3
	EventReadTracingBuffersCompleted = 4
	EventTracingDisabled             = 5
	EventSeizedForBugreport          = 6
	EventFlushStarted                = 9
	EventCloneStarted                = 10
	EventBufferCloned                = 11
)

// AppendServiceEvent appends a service_event (69) payload with the bool
// event field set to true (or, for EventBufferCloned, set to value).
func AppendServiceEvent(dst []byte, event int, value uint32) []byte {
	return wire.AppendNested(dst, FieldServiceEvent, func(b []byte) []byte {
		if event == EventBufferCloned {
			return wire.AppendVarint(b, EventBufferCloned, uint64(value))
		}
		return wire.AppendBool(b, protowire.Number(event), true)
	})
}
