package pipeline

import (
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Status is a snapshot of a running session, for progress displays. It
// is refreshed a few times a second by the service goroutine.
type Status struct {
	Elapsed  time.Duration
	Duration time.Duration // configured duration, 0 = until stopped
	BytesIn  uint64        // chunk bytes copied from producers into buffers
	BytesOut uint64        // packet bytes handed to the sinks
	Packets  uint64        // packets handed to the sinks
	// Losses sums every data_loss counter of the session's stats.
	Losses uint64
	// RingOverwrites is the part of Losses that is chunks overwritten in
	// a ring buffer of a session that reads its buffers once (at stop or
	// for snapshots: a flight recorder): the ring keeping its newest data,
	// as asked (tracefile.LossContext). Displays show it apart.
	RingOverwrites uint64
	Buffers        []BufferStatus
	// Memory is what the session holds in fixed allocations.
	Memory MemoryStatus
	// SinkFailures names each sink that failed, with its first error.
	SinkFailures []string
	// SinkOutages names each network sink whose destination is
	// unreachable now, with the cause ("sinks[1]: connection refused").
	SinkOutages []string
	// Stats, Producers and Sinks: see status_detail.go.
	Stats     tracefile.TraceStats
	Producers []ProducerStatus
	Sinks     []SinkStatus
}

// BufferStatus is one buffer's fill.
type BufferStatus struct {
	Name   string
	Size   int
	Unread int // bytes written since the last complete read of the buffer
}

// MemoryStatus is the session's memory by component, in bytes mapped
// (pages are resident once written). The Go heap is the process's, not a
// session's: see runtime/metrics.
type MemoryStatus struct {
	Buffers int64 // the trace buffers (rings), mapped outside the Go heap
	SMBs    int64 // the shared memory buffers of the session's producers, mapped outside the Go heap
	Clones  int64 // clone memory of the snapshots being taken or written
	Batches int64 // the output batches on their way to the sinks, mapped outside the Go heap
}

// Total is the sum of the components.
func (m MemoryStatus) Total() int64 { return m.Buffers + m.SMBs + m.Clones + m.Batches }

// Fill is the unread fraction of the buffer, capped at 1.
func (b BufferStatus) Fill() float64 {
	if b.Size == 0 {
		return 0
	}
	return min(float64(b.Unread)/float64(b.Size), 1)
}

type statusCell struct{ p atomic.Pointer[Status] }

// Status returns the latest snapshot (the zero Status before Run).
func (s *Service) Status() Status {
	if st := s.status.p.Load(); st != nil {
		return *st
	}
	return Status{Duration: s.cfg.Duration}
}

// publishStatus refreshes the snapshot (service goroutine).
func (s *Service) publishStatus() {
	out := s.outputTotals()
	st := &Status{
		Elapsed: time.Since(s.start), Duration: s.cfg.Duration,
		BytesIn: s.counters.bytesIn, BytesOut: out.Bytes, Packets: out.Packets,
	}
	ts := s.traceStats()
	st.Losses, st.RingOverwrites = lossTotals(s.cfg, tracefile.LossReport(ts))
	for _, bs := range s.buffers {
		st.Buffers = append(st.Buffers, BufferStatus{Name: bs.name, Size: bs.buf.Size(), Unread: bs.unread})
	}
	st.Memory = s.memoryStatus()
	st.SinkFailures = s.sinkFailures()
	for _, l := range s.lanes {
		if err := l.Outage(); err != nil {
			st.SinkOutages = append(st.SinkOutages, l.Name()+": "+err.Error())
		}
	}
	s.fillDetail(st, ts)
	s.status.p.Store(st)
}

// lossTotals sums the data_loss counters of rows for the status line and
// `tracepipe sessions` (bytes_overwritten aside: chunks_overwritten counts
// the same loss), and the part of it that is chunks a ring buffer
// overwrote in a session that reads its buffers once.
func lossTotals(c *config.Config, rows []tracefile.LossRow) (losses, ringOverwrites uint64) {
	for _, r := range rows {
		if !r.Lost() || r.Name == "final_flush_outcome" || r.Name == "bytes_overwritten" {
			continue
		}
		losses += r.Value
		if r.Name == "chunks_overwritten" && !c.WriteIntoFile && r.Index >= 0 && r.Index < len(c.Buffers) &&
			c.Buffers[r.Index].FillPolicy != config.FillPolicyDiscard {
			ringOverwrites += r.Value
		}
	}
	return losses, ringOverwrites
}

// memoryStatus adds up the session's fixed allocations (service
// goroutine). A closed buffer or SMB counts no more.
func (s *Service) memoryStatus() MemoryStatus {
	var m MemoryStatus
	for _, bs := range s.buffers {
		if !bs.buf.Closed() {
			m.Buffers += int64(bs.buf.Size())
		}
	}
	for _, p := range s.producers {
		if p.smb != nil && !p.smb.Closed() {
			m.SMBs += int64(p.smb.Size())
		}
	}
	m.Clones = s.snap.cloneBytes.Load()
	m.Batches = s.free.mapped()
	return m
}
