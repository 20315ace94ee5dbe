package tracefile

import (
	"errors"
	"fmt"

	"github.com/tracepipe/tracepipe/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// ErrBadPacket is wrapped by every [DecodePacket] error.
var ErrBadPacket = errors.New("tracefile: malformed TracePacket")

// PacketInfo is what inspect, stats and filters need to know about a
// TracePacket, read from its top-level fields only. For a field that occurs
// more than once the last occurrence wins, as in protobuf (which is why the
// service can append trusted fields).
type PacketInfo struct {
	Size                  int    // encoded size in bytes
	Timestamp             uint64 // field 8
	HasTimestamp          bool
	TimestampClockID      uint32 // field 58, 0 when absent
	SequenceID            uint32 // trusted_packet_sequence_id (10), 0 when absent
	TrustedUID            int32  // field 3
	HasTrustedUID         bool
	TrustedPID            int32 // field 79
	HasTrustedPID         bool
	MachineID             uint32 // field 98
	PreviousPacketDropped uint32 // field 42 (loss bitmask)
	SequenceFlags         uint32 // field 13
	FirstPacketOnSequence bool   // field 87
	// PayloadField is the number of the field carrying the packet's payload
	// (the `data` oneof): the last top-level field that is not a header
	// field. If there is none it is interned_data or trace_packet_defaults
	// when present, else 0.
	PayloadField int32
	// Payload is the payload field's bytes when it is length-delimited.
	Payload []byte
}

// Kind names the payload field ("track_event", "trace_stats", ...,
// "field_<n>" for an unknown one, "" for a packet with no payload).
func (p *PacketInfo) Kind() string {
	if p.PayloadField == 0 {
		return ""
	}
	return PacketFieldName(p.PayloadField)
}

// DecodePacket reads the top-level fields of a TracePacket. Nested messages
// are not inspected. Errors wrap [ErrBadPacket] and name the byte offset.
func DecodePacket(b []byte) (PacketInfo, error) {
	var p PacketInfo
	p.Size = len(b)
	var fallback int32
	it := wire.Fields(b)
	for it.Next() {
		field := it.Field()
		typ, v, payload := field.Type, field.Varint, field.Bytes
		f := int32(field.Num)
		if typ == protowire.VarintType {
			switch f {
			case FieldTimestamp:
				p.Timestamp, p.HasTimestamp = v, true
			case FieldTimestampClockID:
				p.TimestampClockID = uint32(v)
			case FieldTrustedSequenceID:
				p.SequenceID = uint32(v)
			case FieldTrustedUID:
				p.TrustedUID, p.HasTrustedUID = int32(v), true
			case FieldTrustedPID:
				p.TrustedPID, p.HasTrustedPID = int32(v), true
			case FieldMachineID:
				p.MachineID = uint32(v)
			case FieldPreviousPacketDropped:
				p.PreviousPacketDropped = uint32(v)
			case FieldSequenceFlags:
				p.SequenceFlags = uint32(v)
			case FieldIncrementalStateClear:
				if v != 0 {
					p.SequenceFlags |= 1
				}
			case FieldFirstPacketOnSequence:
				p.FirstPacketOnSequence = v != 0
			}
		}
		if headerField(f) {
			if f == FieldInternedData || f == FieldTracePacketDefaults {
				fallback = f
			}
			continue
		}
		p.PayloadField = f
		p.Payload = payload
	}
	if we := it.Malformed(); we != nil {
		if we.Num != 0 {
			return p, fmt.Errorf("packet offset %d: field %d (%s): %w: %w", we.Off, we.Num, PacketFieldName(int32(we.Num)), we.Err, ErrBadPacket)
		}
		return p, fmt.Errorf("packet %w: %w", it.Err(), ErrBadPacket)
	}
	if p.PayloadField == 0 {
		p.PayloadField = fallback
	}
	return p, nil
}
