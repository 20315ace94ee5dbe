package tracefile

import (
	"errors"
	"fmt"

	"github.com/tracepipe/tracepipe/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// ErrBadTraceStats is wrapped by every TraceStats decoding error.
var ErrBadTraceStats = errors.New("tracefile: malformed TraceStats")

// BufferStats is TraceStats.BufferStats (trace-buffer-v2.md §13): the
// counters of one trace buffer. Field numbers are in [bufferStatsFields].
type BufferStats struct {
	BufferSize                uint64 // 12
	BytesWritten              uint64 // 1
	BytesOverwritten          uint64 // 13
	BytesRead                 uint64 // 14
	PaddingBytesWritten       uint64 // 15
	PaddingBytesCleared       uint64 // 16
	ChunksWritten             uint64 // 2
	ChunksRewritten           uint64 // 10
	ChunksRelocated           uint64 // 20
	ChunksOverwritten         uint64 // 3
	ChunksDiscarded           uint64 // 18
	ChunksRead                uint64 // 17
	ChunksCommittedOutOfOrder uint64 // 11
	WriteWrapCount            uint64 // 4
	PatchesSucceeded          uint64 // 5
	PatchesFailed             uint64 // 6
	ReadaheadsSucceeded       uint64 // 7
	ReadaheadsFailed          uint64 // 8
	AbiViolations             uint64 // 9
	TraceWriterPacketLoss     uint64 // 19
}

// WriterStats is TraceStats.WriterStats: the chunk payload size histogram of
// one (producer, writer).
type WriterStats struct {
	SequenceID      uint64   // 1
	Buffer          uint32   // 4: buffer index in the config
	HistogramCounts []uint64 // 2 (packed): one per bucket plus overflow
	HistogramSum    []int64  // 3 (packed)
}

// FilterStats is TraceStats.FilterStats (the service-side trace filter).
type FilterStats struct {
	InputPackets            uint64   // 1
	InputBytes              uint64   // 2
	OutputBytes             uint64   // 3
	Errors                  uint64   // 4
	TimeTakenNs             uint64   // 5
	BytesDiscardedPerBuffer []uint64 // 20
}

// TraceStats is the TraceStats message the service writes (trace-format.md
// §4). Scalar counters are held as uint64 whatever their proto width.
type TraceStats struct {
	BufferStats              []BufferStats // 1, one per session buffer in config order
	ChunkPayloadHistogramDef []int64       // 17
	WriterStats              []WriterStats // 18
	ProducersConnected       uint64        // 2
	ProducersSeen            uint64        // 3
	DataSourcesRegistered    uint64        // 4
	DataSourcesSeen          uint64        // 5
	TracingSessions          uint64        // 6
	TotalBuffers             uint64        // 7
	ChunksDiscarded          uint64        // 8
	PatchesDiscarded         uint64        // 9
	InvalidPackets           uint64        // 10
	FilterStats              *FilterStats  // 11, nil when absent
	FlushesRequested         uint64        // 12
	FlushesSucceeded         uint64        // 13
	FlushesFailed            uint64        // 14
	FinalFlushOutcome        uint64        // 15: FlushOutcome*
	// Tracepipe holds tracepipe's own counters (field 1000, outside the
	// range Perfetto uses; Perfetto's tools skip it). Nil when absent.
	Tracepipe *TracepipeStats
}

// TracepipeStats are the counters tracepipe's service keeps beyond
// Perfetto's TraceStats: losses that happen before a chunk reaches a
// buffer or after a packet left it. Encoded as TraceStats field 1000.
type TracepipeStats struct {
	ProducerPacketsDropped uint64 // 1: packets producers dropped because their SMB was full
	SMBChunksRejected      uint64 // 2: committed chunks the SMB reader refused as malformed
	CommitsMalformed       uint64 // 3: CommitData messages that did not decode
	CommitsAfterStop       uint64 // 4: commits that arrived after the session finished
	SinkPacketsWritten     uint64 // 5: packets this sink accepted, this TraceStats packet included
	SinkBytesWritten       uint64 // 6: their bytes, this packet excluded
	SinkPacketsFiltered    uint64 // 7: packets a sink's CEL filter rejected
	SinkPacketsDropped     uint64 // 8: packets a sink lost (queue full, write error)
	SinkErrors             uint64 // 9: failed sink operations
	ReadbackDeferred       uint64 // 10: read passes put off because the sinks were behind
	ProtoVMPatchesOK       uint64 // 11: overwritten packets folded into a ProtoVM state
	ProtoVMPatchesFailed   uint64 // 12: patches a VM aborted (program bug, memory limit): state lost
	ProtoVMPacketsUnrouted uint64 // 13: overwritten packets of producers without a VM (their content is gone)
	DataSourceErrors       uint64 // 14: data source start/flush/stop failures
	SequenceRestores       uint64 // 15: sequence state restore packets written ahead of a sequence's packets after a loss
	SinkFilterErrors       uint64 // 16: packets a sink's filter could not evaluate (fate: the sink's filter_error)
	SinkRestoreOverflows   uint64 // 17: a rotated file started without a sequence's state (the fold outgrew its bound)
	// Producers (20) attributes faults to the producers that had any.
	Producers []ProducerStats
	// SinkReconnects (30): times a network sink lost its destination;
	// info: what such an outage lost is counted in sink_packets_dropped.
	SinkReconnects uint64
	// PeerSinks (31): the session's other sinks that lost data or failed,
	// so that each copy of the trace says which other copy is incomplete
	// (peersinks.go).
	PeerSinks []PeerSinkStats
	// TriggersRefused (32): triggers received that did not act (unknown
	// name, producer mismatch, skip_probability, max_per_24h, queue full).
	TriggersRefused uint64
	// SnapshotsRefused (33): snapshots refused (too many in flight, the
	// session ending) or failed.
	SnapshotsRefused uint64
	// AlertRequestsRefused (34): Alertmanager webhook requests refused
	// (missing or wrong bearer token, malformed body).
	AlertRequestsRefused uint64
	// Receiver (40), set only in TraceStats packets a receiver (`tracepipe
	// serve`) wrote: its account of one sender session (receiverstats.go).
	Receiver *ReceiverStats
}

// TraceStats.FinalFlushOutcome values.
const (
	FlushOutcomeUnspecified = 0
	FlushOutcomeSucceeded   = 1
	FlushOutcomeFailed      = 2
)

// ChunkPayloadHistogramBounds are the inclusive upper bounds of the writer
// histogram buckets (the overflow bucket is not listed).
var ChunkPayloadHistogramBounds = []int64{8, 32, 128, 512, 1024, 2048, 4096, 8192, 12288, 16384}

// counterField describes one scalar counter: its field number, name,
// where it lives in the Go struct and whether a non-zero value means data
// was lost (see loss.go for the reasoning).
type counterField[T any] struct {
	num  protowire.Number
	name string
	ptr  func(*T) *uint64
	loss bool
}

// bufferStatsFields lists every BufferStats field in the order the loss
// report prints them. Wire numbers from trace-buffer-v2.md §13 (21 is
// reserved).
var bufferStatsFields = []counterField[BufferStats]{
	{12, "buffer_size", func(s *BufferStats) *uint64 { return &s.BufferSize }, false},
	{1, "bytes_written", func(s *BufferStats) *uint64 { return &s.BytesWritten }, false},
	{13, "bytes_overwritten", func(s *BufferStats) *uint64 { return &s.BytesOverwritten }, true},
	{14, "bytes_read", func(s *BufferStats) *uint64 { return &s.BytesRead }, false},
	{15, "padding_bytes_written", func(s *BufferStats) *uint64 { return &s.PaddingBytesWritten }, false},
	{16, "padding_bytes_cleared", func(s *BufferStats) *uint64 { return &s.PaddingBytesCleared }, false},
	{2, "chunks_written", func(s *BufferStats) *uint64 { return &s.ChunksWritten }, false},
	{10, "chunks_rewritten", func(s *BufferStats) *uint64 { return &s.ChunksRewritten }, false},
	{20, "chunks_relocated", func(s *BufferStats) *uint64 { return &s.ChunksRelocated }, false},
	{3, "chunks_overwritten", func(s *BufferStats) *uint64 { return &s.ChunksOverwritten }, true},
	{18, "chunks_discarded", func(s *BufferStats) *uint64 { return &s.ChunksDiscarded }, true},
	{17, "chunks_read", func(s *BufferStats) *uint64 { return &s.ChunksRead }, false},
	{11, "chunks_committed_out_of_order", func(s *BufferStats) *uint64 { return &s.ChunksCommittedOutOfOrder }, false},
	{4, "write_wrap_count", func(s *BufferStats) *uint64 { return &s.WriteWrapCount }, false},
	{5, "patches_succeeded", func(s *BufferStats) *uint64 { return &s.PatchesSucceeded }, false},
	{6, "patches_failed", func(s *BufferStats) *uint64 { return &s.PatchesFailed }, true},
	{7, "readaheads_succeeded", func(s *BufferStats) *uint64 { return &s.ReadaheadsSucceeded }, false},
	{8, "readaheads_failed", func(s *BufferStats) *uint64 { return &s.ReadaheadsFailed }, false},
	{9, "abi_violations", func(s *BufferStats) *uint64 { return &s.AbiViolations }, true},
	{19, "trace_writer_packet_loss", func(s *BufferStats) *uint64 { return &s.TraceWriterPacketLoss }, true},
}

// traceStatsFields lists the service-level scalar counters of TraceStats.
// final_flush_outcome's severity depends on its value (loss.go).
var traceStatsFields = []counterField[TraceStats]{
	{2, "producers_connected", func(s *TraceStats) *uint64 { return &s.ProducersConnected }, false},
	{3, "producers_seen", func(s *TraceStats) *uint64 { return &s.ProducersSeen }, false},
	{4, "data_sources_registered", func(s *TraceStats) *uint64 { return &s.DataSourcesRegistered }, false},
	{5, "data_sources_seen", func(s *TraceStats) *uint64 { return &s.DataSourcesSeen }, false},
	{6, "tracing_sessions", func(s *TraceStats) *uint64 { return &s.TracingSessions }, false},
	{7, "total_buffers", func(s *TraceStats) *uint64 { return &s.TotalBuffers }, false},
	{8, "chunks_discarded", func(s *TraceStats) *uint64 { return &s.ChunksDiscarded }, true},
	{9, "patches_discarded", func(s *TraceStats) *uint64 { return &s.PatchesDiscarded }, true},
	{10, "invalid_packets", func(s *TraceStats) *uint64 { return &s.InvalidPackets }, true},
	{12, "flushes_requested", func(s *TraceStats) *uint64 { return &s.FlushesRequested }, false},
	{13, "flushes_succeeded", func(s *TraceStats) *uint64 { return &s.FlushesSucceeded }, false},
	{14, "flushes_failed", func(s *TraceStats) *uint64 { return &s.FlushesFailed }, false},
	{15, "final_flush_outcome", func(s *TraceStats) *uint64 { return &s.FinalFlushOutcome }, false},
}

// tracepipeStatsFields lists TracepipeStats' counters.
var tracepipeStatsFields = []counterField[TracepipeStats]{
	{1, "producer_packets_dropped", func(s *TracepipeStats) *uint64 { return &s.ProducerPacketsDropped }, true},
	{2, "smb_chunks_rejected", func(s *TracepipeStats) *uint64 { return &s.SMBChunksRejected }, true},
	{3, "commits_malformed", func(s *TracepipeStats) *uint64 { return &s.CommitsMalformed }, true},
	{4, "commits_after_stop", func(s *TracepipeStats) *uint64 { return &s.CommitsAfterStop }, true},
	{5, "sink_packets_written", func(s *TracepipeStats) *uint64 { return &s.SinkPacketsWritten }, false},
	{6, "sink_bytes_written", func(s *TracepipeStats) *uint64 { return &s.SinkBytesWritten }, false},
	{7, "sink_packets_filtered", func(s *TracepipeStats) *uint64 { return &s.SinkPacketsFiltered }, false},
	{8, "sink_packets_dropped", func(s *TracepipeStats) *uint64 { return &s.SinkPacketsDropped }, true},
	{9, "sink_errors", func(s *TracepipeStats) *uint64 { return &s.SinkErrors }, true},
	{10, "readback_deferred", func(s *TracepipeStats) *uint64 { return &s.ReadbackDeferred }, false},
	{11, "protovm_patches_ok", func(s *TracepipeStats) *uint64 { return &s.ProtoVMPatchesOK }, false},
	{12, "protovm_patches_failed", func(s *TracepipeStats) *uint64 { return &s.ProtoVMPatchesFailed }, false},
	{13, "protovm_packets_unrouted", func(s *TracepipeStats) *uint64 { return &s.ProtoVMPacketsUnrouted }, false},
	{14, "data_source_errors", func(s *TracepipeStats) *uint64 { return &s.DataSourceErrors }, false},
	{15, "sequence_restores", func(s *TracepipeStats) *uint64 { return &s.SequenceRestores }, false},
	{16, "sink_filter_errors", func(s *TracepipeStats) *uint64 { return &s.SinkFilterErrors }, true},
	{17, "sink_restore_overflows", func(s *TracepipeStats) *uint64 { return &s.SinkRestoreOverflows }, true},
	{30, "sink_reconnects", func(s *TracepipeStats) *uint64 { return &s.SinkReconnects }, false},
	{32, "triggers_refused", func(s *TracepipeStats) *uint64 { return &s.TriggersRefused }, false},
	{33, "snapshots_refused", func(s *TracepipeStats) *uint64 { return &s.SnapshotsRefused }, false},
	{34, "alert_requests_refused", func(s *TracepipeStats) *uint64 { return &s.AlertRequestsRefused }, false},
}

// filterStatsFields lists FilterStats' scalar counters.
var filterStatsFields = []counterField[FilterStats]{
	{1, "filter_input_packets", func(s *FilterStats) *uint64 { return &s.InputPackets }, false},
	{2, "filter_input_bytes", func(s *FilterStats) *uint64 { return &s.InputBytes }, false},
	{3, "filter_output_bytes", func(s *FilterStats) *uint64 { return &s.OutputBytes }, false},
	{4, "filter_errors", func(s *FilterStats) *uint64 { return &s.Errors }, true},
	{5, "filter_time_taken_ns", func(s *FilterStats) *uint64 { return &s.TimeTakenNs }, false},
}

// Field numbers of TraceStats' non-scalar fields.
const (
	tsBufferStats  = 1
	tsFilterStats  = 11
	tsHistogramDef = 17
	tsWriterStats  = 18
	tsTracepipe    = 1000
	fsPerBuffer    = 20
	wsSequenceID   = 1
	wsCounts       = 2
	wsSum          = 3
	wsBuffer       = 4
)

func appendCounters[T any](b []byte, fields []counterField[T], s *T) []byte {
	for _, f := range fields {
		b = wire.AppendVarint(b, f.num, *f.ptr(s))
	}
	return b
}

// AppendTraceStats appends a trace_stats (35) field holding ts. Every
// scalar counter is written, zero or not (they are proto2 optionals the
// service always sets).
func AppendTraceStats(dst []byte, ts *TraceStats) []byte {
	return wire.AppendNested(dst, FieldTraceStats, func(b []byte) []byte {
		return appendTraceStatsBody(b, ts)
	})
}

// AppendTraceStatsMessage appends ts as a bare TraceStats message (no
// packet field around it), as GetTraceStatsResponse.trace_stats holds it.
func AppendTraceStatsMessage(dst []byte, ts *TraceStats) []byte {
	return appendTraceStatsBody(dst, ts)
}

func appendTraceStatsBody(b []byte, ts *TraceStats) []byte {
	for i := range ts.BufferStats {
		b = wire.AppendNested(b, tsBufferStats, func(b []byte) []byte {
			return appendCounters(b, bufferStatsFields, &ts.BufferStats[i])
		})
	}
	b = appendCounters(b, traceStatsFields, ts)
	if fs := ts.FilterStats; fs != nil {
		b = wire.AppendNested(b, tsFilterStats, func(b []byte) []byte {
			b = appendCounters(b, filterStatsFields, fs)
			for _, v := range fs.BytesDiscardedPerBuffer {
				b = wire.AppendVarint(b, fsPerBuffer, v)
			}
			return b
		})
	}
	for _, v := range ts.ChunkPayloadHistogramDef {
		b = wire.AppendVarint(b, tsHistogramDef, uint64(v))
	}
	if tp := ts.Tracepipe; tp != nil {
		b = wire.AppendNested(b, tsTracepipe, func(b []byte) []byte {
			b = appendProducerStats(appendCounters(b, tracepipeStatsFields, tp), tp.Producers)
			b = appendPeerSinks(b, tp.PeerSinks)
			if tp.Receiver != nil {
				b = appendReceiverStats(b, tp.Receiver)
			}
			return b
		})
	}
	for i := range ts.WriterStats {
		w := &ts.WriterStats[i]
		b = wire.AppendNested(b, tsWriterStats, func(b []byte) []byte {
			b = wire.AppendVarint(b, wsSequenceID, w.SequenceID)
			if len(w.HistogramCounts) > 0 {
				b = wire.AppendNested(b, wsCounts, func(b []byte) []byte {
					for _, v := range w.HistogramCounts {
						b = protowire.AppendVarint(b, v)
					}
					return b
				})
			}
			if len(w.HistogramSum) > 0 {
				b = wire.AppendNested(b, wsSum, func(b []byte) []byte {
					for _, v := range w.HistogramSum {
						b = protowire.AppendVarint(b, uint64(v))
					}
					return b
				})
			}
			return wire.AppendVarint(b, wsBuffer, uint64(w.Buffer))
		})
	}
	return b
}

// AppendTraceStatsPacket appends a whole service TraceStats packet: the
// service header ([AppendServiceHeader]), timestamp and trace_stats.
func AppendTraceStatsPacket(dst []byte, ts *TraceStats, serviceUID int32, timestamp uint64) []byte {
	dst = AppendServiceHeader(dst, serviceUID)
	dst = AppendTimestamp(dst, timestamp)
	return AppendTraceStats(dst, ts)
}

// DecodeTraceStatsPacket decodes the trace_stats field of a TracePacket.
// ok is false when the packet carries none.
func DecodeTraceStatsPacket(packet []byte) (ts TraceStats, ok bool, err error) {
	info, err := DecodePacket(packet)
	if err != nil {
		return ts, false, err
	}
	if info.PayloadField != FieldTraceStats {
		return ts, false, nil
	}
	ts, err = DecodeTraceStats(info.Payload)
	return ts, true, err
}

// walkFields visits the fields of a message; errors name the offset
// relative to the message named by what.
func walkFields(b []byte, what string, fn func(num protowire.Number, typ protowire.Type, v uint64, payload []byte, off int) error) error {
	it := wire.Fields(b)
	for it.Next() {
		f := it.Field()
		if err := fn(f.Num, f.Type, f.Varint, f.Bytes, f.Off); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s %w: %w", what, err, ErrBadTraceStats)
	}
	return nil
}

func decodeCounters[T any](b []byte, what string, fields []counterField[T], s *T, extra func(num protowire.Number, typ protowire.Type, v uint64, payload []byte, off int) error) error {
	return walkFields(b, what, func(num protowire.Number, typ protowire.Type, v uint64, payload []byte, off int) error {
		if typ == protowire.VarintType {
			for _, f := range fields {
				if f.num == num {
					*f.ptr(s) = v
					return nil
				}
			}
		}
		if extra != nil {
			return extra(num, typ, v, payload, off)
		}
		return nil
	})
}

// repeatedVarints decodes a repeated varint field occurrence, packed or not.
func repeatedVarints(dst []uint64, typ protowire.Type, v uint64, payload []byte, what string, off int) ([]uint64, error) {
	switch typ {
	case protowire.VarintType:
		return append(dst, v), nil
	case protowire.BytesType:
		for len(payload) > 0 {
			x, n := protowire.ConsumeVarint(payload)
			if n < 0 {
				return dst, fmt.Errorf("%s offset %d: packed varint: %w: %w", what, off, protowire.ParseError(n), ErrBadTraceStats)
			}
			dst = append(dst, x)
			payload = payload[n:]
		}
	}
	return dst, nil
}

// DecodeTraceStats decodes a TraceStats message (the bytes of a
// trace_stats field). Unknown fields are ignored; errors wrap
// [ErrBadTraceStats] and name the offset within the message.
func DecodeTraceStats(b []byte) (TraceStats, error) {
	var ts TraceStats
	err := decodeCounters(b, "TraceStats", traceStatsFields, &ts, func(num protowire.Number, typ protowire.Type, v uint64, payload []byte, off int) error {
		var err error
		switch {
		case num == tsBufferStats && typ == protowire.BytesType:
			var bs BufferStats
			what := fmt.Sprintf("TraceStats.buffer_stats[%d] (at TraceStats offset %d)", len(ts.BufferStats), off)
			if err = decodeCounters(payload, what, bufferStatsFields, &bs, nil); err == nil {
				ts.BufferStats = append(ts.BufferStats, bs)
			}
		case num == tsFilterStats && typ == protowire.BytesType:
			fs := &FilterStats{}
			err = decodeCounters(payload, "TraceStats.filter_stats", filterStatsFields, fs, func(num protowire.Number, typ protowire.Type, v uint64, payload []byte, off int) error {
				if num != fsPerBuffer {
					return nil
				}
				var err error
				fs.BytesDiscardedPerBuffer, err = repeatedVarints(fs.BytesDiscardedPerBuffer, typ, v, payload, "TraceStats.filter_stats", off)
				return err
			})
			ts.FilterStats = fs
		case num == tsTracepipe && typ == protowire.BytesType:
			tp := &TracepipeStats{}
			err = decodeCounters(payload, "TraceStats.tracepipe", tracepipeStatsFields, tp, decodeTracepipeExtra(tp))
			ts.Tracepipe = tp
		case num == tsHistogramDef:
			var vals []uint64
			vals, err = repeatedVarints(nil, typ, v, payload, "TraceStats", off)
			for _, x := range vals {
				ts.ChunkPayloadHistogramDef = append(ts.ChunkPayloadHistogramDef, int64(x))
			}
		case num == tsWriterStats && typ == protowire.BytesType:
			var ws WriterStats
			what := fmt.Sprintf("TraceStats.writer_stats[%d]", len(ts.WriterStats))
			err = walkFields(payload, what, func(num protowire.Number, typ protowire.Type, v uint64, payload []byte, off int) error {
				var err error
				switch num {
				case wsSequenceID:
					ws.SequenceID = v
				case wsBuffer:
					ws.Buffer = uint32(v)
				case wsCounts:
					ws.HistogramCounts, err = repeatedVarints(ws.HistogramCounts, typ, v, payload, what, off)
				case wsSum:
					var vals []uint64
					vals, err = repeatedVarints(nil, typ, v, payload, what, off)
					for _, x := range vals {
						ws.HistogramSum = append(ws.HistogramSum, int64(x))
					}
				}
				return err
			})
			if err == nil {
				ts.WriterStats = append(ts.WriterStats, ws)
			}
		}
		return err
	})
	return ts, err
}
