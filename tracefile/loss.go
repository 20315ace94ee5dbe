package tracefile

import "strconv"

// Severities of a [LossRow].
const (
	SeverityDataLoss = "data_loss"
	SeverityInfo     = "info"
)

// LossRow is one counter of a TraceStats packet.
type LossRow struct {
	Name     string // proto field name, e.g. "chunks_overwritten"
	Index    int    // buffer index for per-buffer counters, -1 for service-level ones
	Severity string // SeverityDataLoss or SeverityInfo
	Value    uint64
}

// Lost reports whether the row records actual loss: a data_loss counter
// with a non-zero value.
func (r LossRow) Lost() bool { return r.Severity == SeverityDataLoss && r.Value != 0 }

// LossReport lists every counter of ts: first the service-level counters
// (Index -1), then each buffer's counters (Index = buffer index), then the
// trace filter's, if ts has filter stats. Rows appear even when zero, so a
// report shows what was counted as well as what was lost.
//
// Classification (a non-zero data_loss counter means trace data that was
// produced did not reach the file):
//
//	counter                         level    severity   why
//	chunks_discarded                service  data_loss  chunks refused before any buffer (bad target, permissions)
//	patches_discarded               service  data_loss  patches refused; their packets stay unfinished
//	invalid_packets                 service  data_loss  packets dropped by the validator at readback
//	final_flush_outcome             service  data_loss  only when FAILED (2): data still in producers at stop is missing
//	flushes_failed                  service  info       a periodic flush timing out only delays data
//	producers_*, data_sources_*,
//	tracing_sessions, total_buffers,
//	flushes_requested/succeeded     service  info       bookkeeping
//	bytes_overwritten               buffer   data_loss  unread bytes evicted by the ring buffer
//	chunks_overwritten              buffer   data_loss  chunks evicted with unread data
//	chunks_discarded                buffer   data_loss  DISCARD-mode drops once full (and stale recommits)
//	patches_failed                  buffer   data_loss  a patch target was gone; its packet is lost or left unpatched
//	abi_violations                  buffer   data_loss  malformed chunks from a producer; their contents are dropped
//	trace_writer_packet_loss        buffer   data_loss  chunks carrying the writer's drop sentinel (SMB exhausted)
//	readaheads_failed               buffer   info       includes "next chunk not here yet"; real reassembly loss is
//	                                                    flagged per packet in previous_packet_dropped
//	buffer_size, bytes_written/read,
//	padding_*, chunks_written/
//	rewritten/relocated/read/
//	committed_out_of_order,
//	write_wrap_count,
//	patches_succeeded,
//	readaheads_succeeded            buffer   info       volume and bookkeeping
//	filter_errors                   filter   data_loss  packets the service-side filter failed on
//	filter_* others,
//	filter_bytes_discarded          filter   info       discarding is the filter's purpose
//
// tracepipe's own counters (TracepipeStats, when present) follow with
// Index -1: producer_packets_dropped, smb_chunks_rejected,
// commits_malformed, commits_after_stop, sink_packets_dropped and
// sink_errors are data_loss; the rest (sink volume, filtered packets,
// deferred reads, ProtoVM outcomes, data source errors) are info — a
// filter drops by design, and a data source error shows up as loss in
// the counters it causes. sink_reconnects, triggers_refused,
// snapshots_refused and alert_requests_refused are info (an outage's loss
// is in sink_packets_dropped; a refused trigger loses no trace data).
// Each other sink that lost data or failed (peer_sinks) follows as
// "sinks[i] (destination).packets_dropped" and ".failed", both data_loss:
// this copy is complete, but the session's copy at that destination is
// not.
// A receiver's section (serve.*: batches_missing and batches_refused are
// data_loss) follows when present.
func LossReport(ts TraceStats) []LossRow {
	var rows []LossRow
	for _, f := range traceStatsFields {
		v := *f.ptr(&ts)
		sev := severity(f.loss)
		if f.num == 15 && v == FlushOutcomeFailed {
			sev = SeverityDataLoss
		}
		rows = append(rows, LossRow{Name: f.name, Index: -1, Severity: sev, Value: v})
	}
	for i := range ts.BufferStats {
		for _, f := range bufferStatsFields {
			rows = append(rows, LossRow{Name: f.name, Index: i, Severity: severity(f.loss), Value: *f.ptr(&ts.BufferStats[i])})
		}
	}
	if fs := ts.FilterStats; fs != nil {
		for _, f := range filterStatsFields {
			rows = append(rows, LossRow{Name: f.name, Index: -1, Severity: severity(f.loss), Value: *f.ptr(fs)})
		}
		for i, v := range fs.BytesDiscardedPerBuffer {
			rows = append(rows, LossRow{Name: "filter_bytes_discarded", Index: i, Severity: SeverityInfo, Value: v})
		}
	}
	if tp := ts.Tracepipe; tp != nil {
		for _, f := range tracepipeStatsFields {
			rows = append(rows, LossRow{Name: f.name, Index: -1, Severity: severity(f.loss), Value: *f.ptr(tp)})
		}
		rows = append(rows, producerLossRows(tp)...)
		rows = append(rows, peerSinkLossRows(tp)...)
		if tp.Receiver != nil {
			rows = append(rows, ReceiverLossRows(tp.Receiver)...)
		}
	}
	return rows
}

func severity(loss bool) string {
	if loss {
		return SeverityDataLoss
	}
	return SeverityInfo
}

// HasDataLoss reports whether any row records actual loss.
func HasDataLoss(rows []LossRow) bool {
	for _, r := range rows {
		if r.Lost() {
			return true
		}
	}
	return false
}

// Scope renders where a counter belongs, as WriteLossTable prints it:
// "service", or "buffer N".
func (r LossRow) Scope() string {
	if r.Index < 0 {
		return "service"
	}
	return "buffer " + strconv.Itoa(r.Index)
}
