package tracefile

import (
	"errors"
	"fmt"

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
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 {
			return fmt.Errorf("%w: offset %d: tag: %v", ErrInvalidProducerPacket, off, protowire.ParseError(n))
		}
		if reservedField(num) {
			return fmt.Errorf("%w: offset %d: field %d (%s) is set by the service only", ErrInvalidProducerPacket, off, num, PacketFieldName(int32(num)))
		}
		start := off
		off += n
		switch typ {
		case protowire.VarintType:
			_, n = protowire.ConsumeVarint(b[off:])
		case protowire.Fixed32Type:
			n = 4
			if len(b)-off < 4 {
				n = -1
			}
		case protowire.Fixed64Type:
			n = 8
			if len(b)-off < 8 {
				n = -1
			}
		case protowire.BytesType:
			var l uint64
			l, n = protowire.ConsumeVarint(b[off:])
			if n >= 0 {
				if l > maxFieldLength {
					return fmt.Errorf("%w: offset %d: field %d is %d bytes long (limit %d)", ErrInvalidProducerPacket, start, num, l, maxFieldLength)
				}
				if l > uint64(len(b)-off-n) {
					n = -1
				} else {
					n += int(l)
				}
			}
		default:
			return fmt.Errorf("%w: offset %d: field %d has wire type %d (groups and types 6/7 are not allowed)", ErrInvalidProducerPacket, start, num, typ)
		}
		if n < 0 {
			return fmt.Errorf("%w: offset %d: field %d is truncated or malformed", ErrInvalidProducerPacket, start, num)
		}
		off += n
	}
	return nil
}
