package tracefile

import (
	"strconv"
	"strings"
)

// PacketSelector picks packets of a trace read in file order (as
// `tracepipe protovm apply` picks the packets it feeds a VM): those of one
// sequence, those of the sequences a data source writes, and those a
// predicate accepts. The zero value accepts every packet.
//
// A selector by data source remembers the sequences it has seen carry the
// data source's payload, so one selector serves one pass over one trace.
type PacketSelector struct {
	// DataSource, when set, selects every packet of the sequences
	// (trusted_packet_sequence_id) that carry this data source's payload
	// field, from the first such packet on: "track_event" (field 11),
	// "for_testing" (900), or "field:N" for field N. Any other name
	// selects nothing.
	DataSource string
	// BySequence selects the packets of sequence Sequence only (it takes
	// precedence over DataSource).
	BySequence bool
	Sequence   uint32
	// Filter, when set, is asked first: a packet it returns false for is
	// not selected; one it returns true or an error for goes on to the
	// rules above.
	Filter func(*PacketInfo) (bool, error)

	seqOK map[uint32]bool // sequences that belong to DataSource
}

// dataSourceFields maps well-known data source names to the TracePacket
// field their packets carry.
var dataSourceFields = map[string]int32{
	"track_event": FieldTrackEvent,
	"for_testing": FieldForTesting,
}

// Accept reports whether the packet info describes is selected.
func (s *PacketSelector) Accept(info *PacketInfo) bool {
	if s.Filter != nil {
		if ok, err := s.Filter(info); err == nil && !ok {
			return false
		}
	}
	if s.BySequence {
		return info.SequenceID == s.Sequence
	}
	if s.DataSource == "" {
		return true
	}
	if s.seqOK == nil {
		s.seqOK = map[uint32]bool{}
	}
	if s.seqOK[info.SequenceID] {
		return true
	}
	// A sequence belongs to the data source from its first packet that
	// carries the data source's payload field.
	want, known := dataSourceFields[s.DataSource]
	if num, isNum := strings.CutPrefix(s.DataSource, "field:"); isNum {
		n, err := strconv.ParseUint(num, 10, 31)
		want, known = int32(n), err == nil
	}
	if known && info.PayloadField == want {
		s.seqOK[info.SequenceID] = true
		return true
	}
	return false
}
