package tracefile

import (
	"github.com/tracepipe/tracepipe/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// Sequence flags (TracePacket.sequence_flags, field 13).
const (
	SeqIncrementalStateCleared = 1 // SEQ_INCREMENTAL_STATE_CLEARED
	SeqNeedsIncrementalState   = 2 // SEQ_NEEDS_INCREMENTAL_STATE
)

// restoreStripped reports whether a top-level field of a state must not be
// copied into a restore packet: the trusted suffix (AppendTrusted writes
// it), the packet's time (a restore packet describes the sequence, not an
// event), the loss flag (it comes from Trusted only) and the per-packet
// marker first_packet_on_sequence; the other service-only fields, which a
// state must never forge; and the flags, which AppendRestorePacket writes
// itself.
func restoreStripped(num protowire.Number) bool {
	switch num {
	case FieldTimestamp, FieldTimestampClockID, FieldPreviousPacketDropped,
		FieldFirstPacketOnSequence, FieldSequenceFlags, FieldIncrementalStateClear:
		return true
	}
	return reservedField(num)
}

// AppendRestorePacket appends a complete sequence-state restore TracePacket
// (trace-processor-import.md §7 item 7): the fields of state, an encoded
// TracePacket body that holds the sequence's incremental state
// (interned_data, trace_packet_defaults, ...), then sequence_flags and the
// trusted suffix of t (sequence id, uid, pid, machine id and
// previous_packet_dropped).
//
// sequence_flags is SEQ_INCREMENTAL_STATE_CLEARED, plus any other flag bit
// the state sets except SEQ_NEEDS_INCREMENTAL_STATE (a packet that clears the
// state never depends on the state before it). Fields a state must not carry
// are dropped: trusted and other service-only fields, timestamp,
// timestamp_clock_id, previous_packet_dropped, first_packet_on_sequence and
// the deprecated incremental_state_cleared. The loss flag a reader must see
// is t.PreviousPacketDropped: put the sequence's pending loss here and not on
// its next packet, since a loss flag without CLEARED invalidates the state
// again (§8 t3/t4).
//
// state is untrusted (it is folded from producer packets): copying stops at
// its first malformed field, as protozero's decoder does, so the result is
// always a well-formed packet. It does not allocate when dst has room.
func AppendRestorePacket(dst, state []byte, t Trusted) []byte {
	flags := uint64(SeqIncrementalStateCleared)
	for it := wire.Fields(state); it.Next(); {
		f := it.Field()
		if f.Type == protowire.StartGroupType || f.Type == protowire.EndGroupType {
			break
		}
		if f.Num == FieldSequenceFlags && f.Type == protowire.VarintType {
			flags |= uint64(uint32(f.Varint)) // sequence_flags is a uint32
		}
		if restoreStripped(f.Num) {
			continue
		}
		dst = append(dst, f.Raw(state)...)
	}
	dst = wire.AppendVarint(dst, FieldSequenceFlags, flags&^SeqNeedsIncrementalState)
	return AppendTrusted(dst, t)
}

// IsPayloadField reports whether top-level TracePacket field num is a
// payload (a member of the `data` oneof or an unknown field) rather than a
// header field (timestamp, flags, trusted fields, ...), incremental state
// (interned_data, trace_packet_defaults) or a field only the service may
// write.
func IsPayloadField(num int32) bool {
	return !headerField(num) && !reservedField(protowire.Number(num))
}
