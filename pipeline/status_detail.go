package pipeline

import (
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The detailed part of a Status, for metrics exporters: the counters the
// next TraceStats packet would carry, and per producer and per sink
// figures. Read-only views; nothing here changes the session.

// ProducerStatus is one producer (data source instance).
type ProducerStatus struct {
	ID               uint16 // service ProducerID
	DataSource       string // data source name
	Buffer           int    // target buffer index
	PacketsDropped   uint64 // packets its TraceWriters dropped (SMB full)
	CommitsAfterStop uint64
	DataSourceErrors uint64
}

// SinkStatus is one sink's lane.
type SinkStatus struct {
	Name, Destination  string
	QueueLen, QueueCap int // batches waiting in the lane / its capacity
	Stats              sinks.SinkStats
	// Extra holds sink-specific gauges: a network sink's own queue depth
	// (sink_queue_batches), 1 during an outage of its destination
	// (sink_unreachable).
	Extra map[string]float64
}

// depthReporter is implemented by sinks that hold their own queue (the
// relay and nats sinks).
type depthReporter interface{ QueueDepth() int }

// fillDetail adds the detailed counters to st (service goroutine; the
// lane snapshots never wait on a sink's write).
func (s *Service) fillDetail(st *Status, ts tracefile.TraceStats) {
	st.Stats = ts
	for _, p := range s.producers {
		st.Producers = append(st.Producers, ProducerStatus{
			ID: p.id, DataSource: p.name, Buffer: p.target,
			PacketsDropped:   p.side.PacketsDropped(),
			CommitsAfterStop: p.commitsLate.Load(),
			DataSourceErrors: p.dataSourceErrs.Load(),
		})
	}
	for _, l := range s.lanes {
		ss := SinkStatus{Name: l.Name(), Destination: l.Destination(), QueueLen: l.QueueLen(), QueueCap: l.Capacity(), Stats: l.Snapshot()}
		if d, ok := l.Sink().(depthReporter); ok {
			ss.Extra = map[string]float64{"sink_queue_batches": float64(d.QueueDepth())}
		}
		if l.Network() {
			if ss.Extra == nil {
				ss.Extra = map[string]float64{}
			}
			ss.Extra["sink_unreachable"] = 0
			if l.Outage() != nil {
				ss.Extra["sink_unreachable"] = 1
			}
		}
		st.Sinks = append(st.Sinks, ss)
	}
}
