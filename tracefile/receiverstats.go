package tracefile

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// ReceiverStats is what a receiver (`tracepipe serve`) counted of one
// sender session it stored: TracepipeStats.receiver (field 40). A
// receiver writes it into the trace it stores, inside a copy of the
// sender's latest TraceStats (so a reader that takes the last TraceStats,
// as trace_processor does, sees the sender's counters unchanged), after a
// gap or a refusal and when a connection ends. Its counters are the
// receiver's side of the hop; the sender's sink_* counters are the
// sender's side (a relay sink counts what was acknowledged when it wrote
// its TraceStats, so its sink_packets_written trails the packets stored).
type ReceiverStats struct {
	Machine  uint64   // 1: the sender's 64-bit machine id (not the merged file's small machine_id)
	Hostname string   // 2
	Session  [16]byte // 3: the sender's session id
	// PacketsStored counts the session's packets in this file, this
	// packet included; BatchesStored and BytesStored the same for batches
	// and packet bytes (framing excluded, this packet excluded).
	BatchesStored uint64 // 4
	PacketsStored uint64 // 5
	BytesStored   uint64 // 6
	// BatchesMissing: batch numbers the receiver never got (a jump in the
	// numbering: NATS messages removed from the stream, a sender that
	// skipped numbers). Each is lost data.
	BatchesMissing uint64 // 7
	Gaps           uint64 // 8: jumps in the numbering (one per run of missing batches)
	// BatchesRefused: batches the receiver would not store (numbered
	// beyond its window, too many sequences, over its disk budget). Each
	// is lost data unless the sender resent it and it was stored later.
	BatchesRefused    uint64 // 9
	BatchesDuplicated uint64 // 10: batches received again and suppressed (resends)
	// GapRanges names the first gaps: batches [From, To] were missing.
	GapRanges []GapRange // 11 (at most MaxGapRanges kept)
	// SenderStats (12) says the TraceStats around this section is a copy
	// of the sender's latest; when false the receiver had none and the
	// other counters are absent (not zero).
	SenderStats bool
}

// GapRange is a run of missing batch numbers, From..To inclusive.
type GapRange struct{ From, To uint64 }

// MaxGapRanges bounds ReceiverStats.GapRanges.
const MaxGapRanges = 16

const tpReceiver = 40

var receiverStatsFields = []counterField[ReceiverStats]{
	{4, "batches_stored", func(s *ReceiverStats) *uint64 { return &s.BatchesStored }, false},
	{5, "packets_stored", func(s *ReceiverStats) *uint64 { return &s.PacketsStored }, false},
	{6, "bytes_stored", func(s *ReceiverStats) *uint64 { return &s.BytesStored }, false},
	{7, "batches_missing", func(s *ReceiverStats) *uint64 { return &s.BatchesMissing }, true},
	{8, "gaps", func(s *ReceiverStats) *uint64 { return &s.Gaps }, false},
	{9, "batches_refused", func(s *ReceiverStats) *uint64 { return &s.BatchesRefused }, true},
	{10, "batches_duplicated", func(s *ReceiverStats) *uint64 { return &s.BatchesDuplicated }, false},
}

// SessionString is the session id as 32 hex digits.
func (r *ReceiverStats) SessionString() string { return hex.EncodeToString(r.Session[:]) }

// GapText names the recorded gaps, e.g. "batches 5-8, 12" ("" when none).
func (r *ReceiverStats) GapText() string {
	if len(r.GapRanges) == 0 {
		return ""
	}
	parts := make([]string, 0, len(r.GapRanges)+1)
	for _, g := range r.GapRanges {
		if g.From == g.To {
			parts = append(parts, itoa(g.From))
		} else {
			parts = append(parts, itoa(g.From)+"-"+itoa(g.To))
		}
	}
	if r.Gaps > uint64(len(r.GapRanges)) {
		parts = append(parts, fmt.Sprintf("and %d more gap(s)", r.Gaps-uint64(len(r.GapRanges))))
	}
	return "batches " + strings.Join(parts, ", ")
}

func appendReceiverStats(b []byte, r *ReceiverStats) []byte {
	return wire.AppendNested(b, tpReceiver, func(b []byte) []byte {
		b = wire.AppendVarint(b, 1, r.Machine)
		b = wire.AppendString(b, 2, r.Hostname)
		b = wire.AppendBytes(b, 3, r.Session[:])
		b = appendCounters(b, receiverStatsFields, r)
		if r.SenderStats {
			b = wire.AppendBool(b, 12, true)
		}
		for _, g := range r.GapRanges {
			b = wire.AppendNested(b, 11, func(b []byte) []byte {
				b = wire.AppendVarint(b, 1, g.From)
				return wire.AppendVarint(b, 2, g.To)
			})
		}
		return b
	})
}

func decodeReceiverStats(payload []byte) (*ReceiverStats, error) {
	r := &ReceiverStats{}
	err := decodeCounters(payload, "TraceStats.tracepipe.receiver", receiverStatsFields, r,
		func(num protowire.Number, typ protowire.Type, v uint64, s []byte, _ int) error {
			switch {
			case num == 1 && typ == protowire.VarintType:
				r.Machine = v
			case num == 2 && typ == protowire.BytesType:
				r.Hostname = string(s)
			case num == 3 && typ == protowire.BytesType:
				copy(r.Session[:], s)
			case num == 12 && typ == protowire.VarintType:
				r.SenderStats = v != 0
			case num == 11 && typ == protowire.BytesType && len(r.GapRanges) < MaxGapRanges:
				var g GapRange
				err := walkFields(s, "TraceStats.tracepipe.receiver.gap", func(num protowire.Number, typ protowire.Type, v uint64, _ []byte, _ int) error {
					if typ == protowire.VarintType {
						switch num {
						case 1:
							g.From = v
						case 2:
							g.To = v
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				r.GapRanges = append(r.GapRanges, g)
			}
			return nil
		})
	return r, err
}

// ReceiverLossRows lists the receiver's counters, named "serve.<counter>"
// so a report says they are the receiving side's.
func ReceiverLossRows(r *ReceiverStats) []LossRow {
	rows := make([]LossRow, 0, len(receiverStatsFields))
	for _, f := range receiverStatsFields {
		rows = append(rows, LossRow{Name: "serve." + f.name, Index: -1, Severity: severity(f.loss), Value: *f.ptr(r)})
	}
	return rows
}

// AppendReceiverOnlyTraceStats appends a trace_stats (35) field holding
// only TracepipeStats.receiver: what a receiver writes for a session
// whose own TraceStats it has not seen. Perfetto's counters are left out
// rather than written as zeros.
func AppendReceiverOnlyTraceStats(dst []byte, r *ReceiverStats) []byte {
	return wire.AppendNested(dst, FieldTraceStats, func(b []byte) []byte {
		return wire.AppendNested(b, tsTracepipe, func(b []byte) []byte {
			return appendReceiverStats(b, r)
		})
	})
}
