package tracefile

import (
	"errors"
	"fmt"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrInvalidProducerPacket is wrapped by every ValidateProducerPacket error.
var ErrInvalidProducerPacket = errors.New("tracefile: invalid producer packet")

// maxFieldLength is the longest length-delimited field a producer packet
// may hold (2^28 - 1, as Perfetto's PacketStreamValidator).
const maxFieldLength = 1<<28 - 1

// reservedField reports whether a top-level TracePacket field may only be
// written by the service (trace-format.md §3).
func reservedField(num protowire.Number) bool {
	switch num {
	case FieldTrustedUID, FieldTrustedSequenceID, FieldTraceConfig, FieldTraceStats,
		FieldSynchronizationMarker, FieldCompressedPackets, FieldZstdCompressedPackets,
		FieldServiceEvent, FieldTrustedPID, FieldMachineID, FieldTraceProvenance, FieldProtoVMs:
		return true
	}
	return false
}

// ValidateProducerPacket checks a packet read back from a trace buffer
// before the service stamps its trusted fields, as Perfetto's
// PacketStreamValidator does: every top-level field must be well formed
// (no groups, no wire types 6/7, no varint over 64 bits, no length over
// 2^28-1, nothing truncated) and none may be a service-only field
// (trusted_uid, trusted_packet_sequence_id, trusted_pid, machine_id,
// trace_config, trace_stats, synchronization_marker, service_event,
// compressed packets, trace_provenance, protovms). Nested messages are
// not inspected. Because the packet then ends on a field boundary, the
// trusted fields appended after it cannot be swallowed by a producer's
// truncated field, and because the last occurrence of a field wins, a
// producer cannot override them.
//
// It does not allocate unless it returns an error; the error names the
// field and byte offset.
func ValidateProducerPacket(b []byte) error {
	it := wire.Fields(b)
	for it.Next() {
		f := it.Field()
		if err := checkProducerField(f.Off, f.Num, f.Type, uint64(len(f.Bytes))); err != nil {
			return err
		}
	}
	if we := it.Malformed(); we != nil {
		if we.Num == 0 {
			return fmt.Errorf("%w: offset %d: tag: %v", ErrInvalidProducerPacket, we.Off, we.Err)
		}
		// The field's tag was read: a reserved number, a bad type or an
		// over-long length says more than "truncated".
		l, _ := protowire.ConsumeVarint(b[we.ValOff:])
		if err := checkProducerField(we.Off, we.Num, we.Type, l); err != nil {
			return err
		}
		return fmt.Errorf("%w: offset %d: field %d is truncated or malformed", ErrInvalidProducerPacket, we.Off, we.Num)
	}
	return nil
}

// checkProducerField checks one field of a producer packet at offset off:
// not a service-only field, not a group or unknown wire type, and, when
// length-delimited, at most maxFieldLength bytes (l).
func checkProducerField(off int, num protowire.Number, typ protowire.Type, l uint64) error {
	if reservedField(num) {
		return fmt.Errorf("%w: offset %d: field %d (%s) is set by the service only", ErrInvalidProducerPacket, off, num, PacketFieldName(int32(num)))
	}
	switch typ {
	case protowire.VarintType, protowire.Fixed32Type, protowire.Fixed64Type:
	case protowire.BytesType:
		if l > maxFieldLength {
			return fmt.Errorf("%w: offset %d: field %d is %d bytes long (limit %d)", ErrInvalidProducerPacket, off, num, l, maxFieldLength)
		}
	default:
		return fmt.Errorf("%w: offset %d: field %d has wire type %d (groups and types 6/7 are not allowed)", ErrInvalidProducerPacket, off, num, typ)
	}
	return nil
}
