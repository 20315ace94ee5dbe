package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/sinks/natsink"
	"github.com/tracepipe/tracepipe/sinks/relay"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// StatusSource is what a session collector reads (a *pipeline.Service).
type StatusSource interface{ Status() pipeline.Status }

// Session reports a running session from its published Status: the
// TraceStats counters (session-wide, per buffer), per producer and per
// sink counters and queue depths.
func Session(src StatusSource) Func {
	return func(emit func(Sample)) {
		st := src.Status()
		gauge := func(name, help string, v float64, labels ...string) {
			emit(Sample{Name: name, Help: help, Kind: prometheus.GaugeValue, Value: v, Labels: labels})
		}
		counter := func(name, help string, v uint64, labels ...string) {
			emit(Sample{Name: name, Help: help, Kind: prometheus.CounterValue, Value: float64(v), Labels: labels})
		}
		gauge("session_elapsed_seconds", "Time since the session started.", st.Elapsed.Seconds())
		counter("session_bytes_in_total", "Chunk bytes copied from producers into buffers.", st.BytesIn)
		counter("session_bytes_out_total", "Packet bytes handed to the sinks.", st.BytesOut)
		counter("session_packets_out_total", "Packets handed to the sinks.", st.Packets)
		counter("session_losses_total", "Sum of every data-loss counter of TraceStats.", st.Losses)
		for _, m := range []struct {
			component string
			v         int64
		}{{"buffers", st.Memory.Buffers}, {"smbs", st.Memory.SMBs}, {"clones", st.Memory.Clones}, {"batches", st.Memory.Batches}} {
			gauge("session_memory_bytes", "Memory the session holds in fixed allocations outside the Go heap, by component (mapped bytes).", float64(m.v), "component", m.component)
		}
		Struct(emit, "trace_stats_", "TraceStats counter", st.Stats)
		if st.Stats.Tracepipe != nil {
			Struct(emit, "trace_stats_", "TraceStats tracepipe counter", st.Stats.Tracepipe)
		}
		for i, b := range st.Buffers {
			labels := []string{"buffer", itoa(i), "name", b.Name}
			gauge("buffer_size_bytes", "Size of the trace buffer.", float64(b.Size), labels...)
			gauge("buffer_unread_bytes", "Bytes written to the buffer since its last complete read (its queue depth).", float64(b.Unread), labels...)
			if i < len(st.Stats.BufferStats) {
				Struct(emit, "buffer_", "TraceStats.BufferStats counter", st.Stats.BufferStats[i], labels...)
			}
		}
		for _, p := range st.Producers {
			labels := []string{"producer", itoa(p.ID), "data_source", p.DataSource, "buffer", itoa(p.Buffer)}
			Struct(emit, "producer_", "Producer counter", p, labels...)
		}
		for _, s := range st.Sinks {
			labels := []string{"sink", s.Name, "destination", s.Destination}
			gauge("sink_lane_queue_batches", "Batches waiting in the sink's lane.", float64(s.QueueLen), labels...)
			gauge("sink_lane_queue_capacity_batches", "Capacity of the sink's lane queue.", float64(s.QueueCap), labels...)
			for name, v := range s.Extra {
				gauge(name, extraHelp[name], v, labels...)
			}
			Struct(emit, "sink_", "Sink counter", s.Stats, labels...)
		}
	}
}

// Receiver reports `tracepipe serve`: what the store wrote, the relay
// server's connections (srv may be nil) and the NATS reader (may be nil).
func Receiver(store *remote.Store, srv *relay.Server, rd *natsink.Reader) Func {
	return func(emit func(Sample)) {
		counter := func(name, help string, v uint64) {
			emit(Sample{Name: name, Help: help, Kind: prometheus.CounterValue, Value: float64(v)})
		}
		gauge := func(name, help string, v float64) {
			emit(Sample{Name: name, Help: help, Kind: prometheus.GaugeValue, Value: v})
		}
		counter("serve_batches_total", "Batches appended to trace files.", store.Stats.Batches.Load())
		counter("serve_packets_total", "Senders' packets appended to trace files.", store.Stats.Packets.Load())
		counter("serve_receiver_packets_total", "Packets serve wrote itself: its account of a session (receiver section of TraceStats).", store.Stats.ReceiverPackets.Load())
		counter("serve_bytes_total", "Packet bytes appended to trace files.", store.Stats.Bytes.Load())
		counter("serve_duplicate_batches_total", "Batches received again and suppressed.", store.Stats.Duplicates.Load())
		counter("serve_gaps_total", "Batches that followed a missing batch.", store.Stats.Gaps.Load())
		counter("serve_batches_missing_total", "Batch numbers never received (the gaps' width), written into the traces as loss.", store.Stats.Missing.Load())
		refused := func(limit string, v uint64) {
			emit(Sample{Name: "serve_refused_total", Help: "Batches, sessions, connections or frames refused by a limit of serve.", Kind: prometheus.CounterValue, Value: float64(v), Labels: []string{"limit", limit}})
		}
		refused("seq_window", store.Stats.RefusedWindow.Load())
		refused("max_sequences", store.Stats.RefusedSequences.Load())
		refused("max_disk", store.Stats.RefusedDisk.Load())
		refused("max_sessions_per_machine", store.Stats.RefusedSessions.Load())
		gauge("serve_disk_bytes", "Bytes of the files in --out as serve counts them (with --max-disk).", float64(store.Stats.DiskBytes.Load()))
		gauge("serve_streams", "Sender sessions attached now.", float64(store.Stats.Streams.Load()))
		counter("serve_clock_sync_rounds_total", "Clock-sync rounds written into a merged trace as remote_clock_sync.", store.Stats.Clock.Rounds.Load())
		counter("serve_clock_sync_rounds_skipped_total", "Clock-sync rounds not written: too soon after the last, or congested.", store.Stats.Clock.Skipped.Load())
		if srv != nil {
			gauge("serve_connections", "Relay connections open now.", float64(srv.Connections.Load()))
			counter("serve_connections_accepted_total", "Relay connections accepted.", srv.Accepted.Load())
			counter("serve_connections_rejected_total", "Relay connections ended by a protocol, TLS, limit or timeout error.", srv.Rejected.Load())
			refused("max_conns", srv.Stats.RefusedConnLimit.Load())
			counter("serve_evicted_idle_total", "Idle relay connections closed to make room for a new one at --max-conns.", srv.Stats.EvictedIdle.Load())
			refused("frame_memory", srv.Stats.RefusedMemory.Load())
			timeout := func(which string, v uint64) {
				emit(Sample{Name: "serve_timeouts_total", Help: "Relay connections closed by a deadline.", Kind: prometheus.CounterValue, Value: float64(v), Labels: []string{"timeout", which}})
			}
			timeout("hello", srv.Stats.TimeoutHello.Load())
			timeout("idle", srv.Stats.TimeoutIdle.Load())
			timeout("frame", srv.Stats.TimeoutFrame.Load())
			timeout("write", srv.Stats.TimeoutWrite.Load())
			gauge("serve_frame_memory_bytes", "Bytes of frame buffers relay connections hold now.", float64(srv.FrameMemoryUsed()))
			counter("serve_sessions_started_total", "Relay sessions (hellos) accepted.", srv.Stats.SessionsStarted.Load())
			counter("serve_sessions_ended_total", "Relay sessions ended.", srv.Stats.SessionsEnded.Load())
		}
		if rd != nil {
			counter("serve_nats_messages_total", "NATS messages consumed and stored.", rd.Batches.Load())
			counter("serve_nats_bad_messages_total", "NATS messages skipped as malformed.", rd.Bad.Load())
			counter("serve_nats_refused_total", "NATS messages skipped because a limit refused them (numbered beyond --seq-window, ...).", rd.Refused.Load())
		}
	}
}

// extraHelp describes the sink-specific gauges of pipeline.SinkStatus.Extra.
var extraHelp = map[string]string{
	"sink_queue_batches": "Batches a network sink holds unacknowledged (its own queue).",
	"sink_unreachable":   "1 while a network sink's destination is unreachable (an outage), else 0.",
}

// LabeledSession is one of several sessions a process runs, with the
// value of its "session" label.
type LabeledSession struct {
	ID  string
	Src StatusSource
}

// Sessions reports every session list returns at scrape time (serve
// --perfetto's consumer sessions) as Session reports one, each sample
// labelled session=ID.
func Sessions(list func() []LabeledSession) Func {
	return func(emit func(Sample)) {
		for _, ls := range list() {
			Session(ls.Src)(func(s Sample) {
				s.Labels = append([]string{"session", ls.ID}, s.Labels...)
				emit(s)
			})
		}
	}
}
