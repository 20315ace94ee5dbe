package tracefile

import (
	"strconv"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// ProducerStats attributes faults to one producer (one data source
// instance): TracepipeStats.producers (field 15), one entry per producer
// that had any. Fields: 1 index (data_sources[index]), 2 source (plugin
// path or data source name), the counters below, 7 error (why it failed to
// start or died, if it did).
type ProducerStats struct {
	Index  uint64
	Source string
	// InvalidPackets: packets dropped at readback (reserved trusted
	// fields, malformed framing).
	InvalidPackets uint64 // 3
	// SMBChunksRejected: committed chunks the SMB reader refused (ABI
	// violations: out-of-range indices, bad headers).
	SMBChunksRejected uint64 // 4
	// CommitsMalformed: CommitData messages that did not decode.
	CommitsMalformed uint64 // 5
	// ChunksDiscarded: chunks aimed at a buffer the producer may not write.
	ChunksDiscarded uint64 // 6
	Error           string // 7
	// Died: the producer (a plugin process) went away while recording.
	Died uint64 // 8
	// StderrLinesSuppressed: lines of a plugin's stderr over its rate
	// limit (data_sources[i].limits.stderr_*), counted instead of logged.
	// Not trace data: informational.
	StderrLinesSuppressed uint64 // 9
}

// Faulty reports whether the producer misbehaved or failed.
func (p *ProducerStats) Faulty() bool {
	return p.InvalidPackets+p.SMBChunksRejected+p.CommitsMalformed+p.ChunksDiscarded+p.Died+p.StderrLinesSuppressed != 0 || p.Error != ""
}

const tpProducers = 20

var producerStatsFields = []counterField[ProducerStats]{
	{1, "index", func(s *ProducerStats) *uint64 { return &s.Index }, false},
	{3, "invalid_packets", func(s *ProducerStats) *uint64 { return &s.InvalidPackets }, true},
	{4, "smb_chunks_rejected", func(s *ProducerStats) *uint64 { return &s.SMBChunksRejected }, true},
	{5, "commits_malformed", func(s *ProducerStats) *uint64 { return &s.CommitsMalformed }, true},
	{6, "chunks_discarded", func(s *ProducerStats) *uint64 { return &s.ChunksDiscarded }, true},
	{8, "died", func(s *ProducerStats) *uint64 { return &s.Died }, true},
	{9, "stderr_lines_suppressed", func(s *ProducerStats) *uint64 { return &s.StderrLinesSuppressed }, false},
}

func appendProducerStats(b []byte, ps []ProducerStats) []byte {
	for i := range ps {
		p := &ps[i]
		b = wire.AppendNested(b, tpProducers, func(b []byte) []byte {
			b = appendCounters(b, producerStatsFields, p)
			b = wire.AppendString(b, 2, p.Source)
			if p.Error != "" {
				b = wire.AppendString(b, 7, p.Error)
			}
			return b
		})
	}
	return b
}

// decodeTracepipeExtra decodes TracepipeStats' non-counter fields.
func decodeTracepipeExtra(tp *TracepipeStats) func(num protowire.Number, typ protowire.Type, v uint64, payload []byte, off int) error {
	return func(num protowire.Number, typ protowire.Type, _ uint64, payload []byte, _ int) error {
		if num == tpPeerSinks && typ == protowire.BytesType {
			return decodePeerSink(tp, payload)
		}
		if num == tpReceiver && typ == protowire.BytesType {
			r, err := decodeReceiverStats(payload)
			tp.Receiver = r
			return err
		}
		if num != tpProducers || typ != protowire.BytesType {
			return nil
		}
		var p ProducerStats
		err := decodeCounters(payload, "TraceStats.tracepipe.producers", producerStatsFields, &p,
			func(num protowire.Number, typ protowire.Type, _ uint64, s []byte, _ int) error {
				if typ == protowire.BytesType {
					switch num {
					case 2:
						p.Source = string(s)
					case 7:
						p.Error = string(s)
					}
				}
				return nil
			})
		tp.Producers = append(tp.Producers, p)
		return err
	}
}

// producerLossRows lists each faulty producer's counters, named
// "data_sources[i].<counter>" so a report says whose they are.
func producerLossRows(tp *TracepipeStats) []LossRow {
	var rows []LossRow
	for i := range tp.Producers {
		p := &tp.Producers[i]
		for _, f := range producerStatsFields[1:] {
			rows = append(rows, LossRow{Name: "data_sources[" + itoa(p.Index) + "] (" + p.Source + ")." + f.name, Index: -1, Severity: severity(f.loss), Value: *f.ptr(p)})
		}
	}
	return rows
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
