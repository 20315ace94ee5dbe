package tracefile

import "github.com/tracepipe/tracepipe/internal/wire"

// Trusted holds the fields the service appends to every producer packet
// after validating it (trace-format.md §3). Producers can never set them:
// the service rejects packets that carry them and appends its own, and
// because the last occurrence of a field wins, appending is enough.
type Trusted struct {
	UID        int32  // trusted_uid (3): the producer's uid
	SequenceID uint32 // trusted_packet_sequence_id (10); 1 is the service's own
	PID        int32  // trusted_pid (79), written only when HasPID
	HasPID     bool
	MachineID  uint32 // machine_id (98), written only when non-zero
	// PreviousPacketDropped is the loss bitmask (42), written only when
	// non-zero (trace-buffer-v2.md §8).
	PreviousPacketDropped uint32
}

// AppendTrusted appends the trusted suffix in the service's order:
// trusted_uid, trusted_packet_sequence_id, trusted_pid (if known),
// machine_id (if non-zero), previous_packet_dropped (if non-zero).
// It does not allocate when dst has room.
func AppendTrusted(dst []byte, t Trusted) []byte {
	dst = wire.AppendInt32(dst, FieldTrustedUID, t.UID)
	dst = wire.AppendVarint(dst, FieldTrustedSequenceID, uint64(t.SequenceID))
	if t.HasPID {
		dst = wire.AppendInt32(dst, FieldTrustedPID, t.PID)
	}
	if t.MachineID != 0 {
		dst = wire.AppendVarint(dst, FieldMachineID, uint64(t.MachineID))
	}
	if t.PreviousPacketDropped != 0 {
		dst = wire.AppendVarint(dst, FieldPreviousPacketDropped, uint64(t.PreviousPacketDropped))
	}
	return dst
}

// AppendFirstPacketOnSequence appends first_packet_on_sequence = true (87).
func AppendFirstPacketOnSequence(dst []byte) []byte {
	return wire.AppendBool(dst, FieldFirstPacketOnSequence, true)
}

// AppendServiceHeader appends the header of a service-generated packet
// (SetServiceTracePacketHeader): trusted_uid = the service's uid,
// trusted_packet_sequence_id = 1 and timestamp_clock_id = BOOTTIME (6),
// the latter set even when the packet has no timestamp.
func AppendServiceHeader(dst []byte, serviceUID int32) []byte {
	dst = wire.AppendInt32(dst, FieldTrustedUID, serviceUID)
	dst = wire.AppendVarint(dst, FieldTrustedSequenceID, serviceSequenceID)
	return wire.AppendVarint(dst, FieldTimestampClockID, clockBoottime)
}

// AppendTimestamp appends timestamp (8).
func AppendTimestamp(dst []byte, ts uint64) []byte {
	return wire.AppendVarint(dst, FieldTimestamp, ts)
}
