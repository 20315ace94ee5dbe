package tracefile

import "google.golang.org/protobuf/encoding/protowire"

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
	for off := 0; off < len(state); {
		num, typ, n := protowire.ConsumeTag(state[off:])
		if n < 0 {
			break
		}
		m := protowire.ConsumeFieldValue(num, typ, state[off+n:])
		if m < 0 || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
			break
		}
		field := state[off : off+n+m]
		off += n + m
		if num == FieldSequenceFlags && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(field[n:])
			flags |= uint64(uint32(v)) // sequence_flags is a uint32
		}
		if restoreStripped(num) {
			continue
		}
		dst = append(dst, field...)
	}
	dst = appendVarintField(dst, FieldSequenceFlags, flags&^SeqNeedsIncrementalState)
	return AppendTrusted(dst, t)
}
