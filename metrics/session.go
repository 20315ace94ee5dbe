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
		}{{"buffers", st.Memory.Buffers}, {"smbs", st.Memory.SMBs}, {"clones", st.Memory.Clones}} {
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
				gauge(name, "Batches a network sink holds unacknowledged (its own queue).", v, labels...)
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
		counter("serve_packets_total", "Packets appended to trace files.", store.Stats.Packets.Load())
		counter("serve_bytes_total", "Packet bytes appended to trace files.", store.Stats.Bytes.Load())
		counter("serve_duplicate_batches_total", "Batches received again and suppressed.", store.Stats.Duplicates.Load())
		counter("serve_gaps_total", "Batches that followed a missing batch.", store.Stats.Gaps.Load())
		gauge("serve_streams", "Sender sessions attached now.", float64(store.Stats.Streams.Load()))
		if srv != nil {
			gauge("serve_connections", "Relay connections open now.", float64(srv.Connections.Load()))
			counter("serve_connections_accepted_total", "Relay connections accepted.", srv.Accepted.Load())
			counter("serve_connections_rejected_total", "Relay connections ended by a protocol or TLS error.", srv.Rejected.Load())
		}
		if rd != nil {
			counter("serve_nats_messages_total", "NATS messages consumed and stored.", rd.Batches.Load())
			counter("serve_nats_bad_messages_total", "NATS messages skipped as malformed.", rd.Bad.Load())
		}
	}
}
