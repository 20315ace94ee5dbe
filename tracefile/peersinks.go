package tracefile

import (
	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// PeerSinkStats is one entry of TracepipeStats.peer_sinks (field 31): a
// sink of the same session, other than the one whose TraceStats this is,
// that lost packets or failed. A local file thus says that the remote
// copy of the session (a relay or NATS destination) is incomplete, and
// why. Fields: 1 index (sinks[index]), 2 name, 3 destination, the
// counters below, 8 error (the sink's cause of failure, if it failed).
type PeerSinkStats struct {
	Index          uint64 // 1
	Name           string // 2
	Destination    string // 3
	PacketsWritten uint64 // 4: delivered (for a network sink: acknowledged)
	PacketsDropped uint64 // 5: lost (queue, errors, unacknowledged at close)
	Errors         uint64 // 6: failed operations
	Failed         uint64 // 7: 1 when the sink failed (Error says why)
	Error          string // 8
	Reconnects     uint64 // 9: outages of a network sink's destination
}

const tpPeerSinks = 31

var peerSinkFields = []counterField[PeerSinkStats]{
	{1, "index", func(s *PeerSinkStats) *uint64 { return &s.Index }, false},
	{4, "packets_written", func(s *PeerSinkStats) *uint64 { return &s.PacketsWritten }, false},
	{5, "packets_dropped", func(s *PeerSinkStats) *uint64 { return &s.PacketsDropped }, true},
	{6, "errors", func(s *PeerSinkStats) *uint64 { return &s.Errors }, false},
	{7, "failed", func(s *PeerSinkStats) *uint64 { return &s.Failed }, true},
	{9, "reconnects", func(s *PeerSinkStats) *uint64 { return &s.Reconnects }, false},
}

func appendPeerSinks(b []byte, ps []PeerSinkStats) []byte {
	for i := range ps {
		p := &ps[i]
		b = wire.AppendNested(b, tpPeerSinks, func(b []byte) []byte {
			b = appendCounters(b, peerSinkFields, p)
			b = wire.AppendString(b, 2, p.Name)
			b = wire.AppendString(b, 3, p.Destination)
			if p.Error != "" {
				b = wire.AppendString(b, 8, p.Error)
			}
			return b
		})
	}
	return b
}

func decodePeerSink(tp *TracepipeStats, payload []byte) error {
	var p PeerSinkStats
	err := decodeCounters(payload, "TraceStats.tracepipe.peer_sinks", peerSinkFields, &p,
		func(num protowire.Number, typ protowire.Type, _ uint64, s []byte, _ int) error {
			if typ == protowire.BytesType {
				switch num {
				case 2:
					p.Name = string(s)
				case 3:
					p.Destination = string(s)
				case 8:
					p.Error = string(s)
				}
			}
			return nil
		})
	tp.PeerSinks = append(tp.PeerSinks, p)
	return err
}

// peerSinkLossRows lists each other sink's counters, named
// "sinks[i] (destination).<counter>" so a report says whose they are.
func peerSinkLossRows(tp *TracepipeStats) []LossRow {
	var rows []LossRow
	for i := range tp.PeerSinks {
		p := &tp.PeerSinks[i]
		for _, f := range peerSinkFields[1:] {
			rows = append(rows, LossRow{Name: "sinks[" + itoa(p.Index) + "] (" + p.Destination + ")." + f.name, Index: -1, Severity: severity(f.loss), Value: *f.ptr(p)})
		}
	}
	return rows
}
