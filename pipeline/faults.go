package pipeline

import (
	"github.com/tracepipe/tracepipe/tracefile"
)

// producerFaults are the faults the service attributes to one producer
// (service goroutine only); they are written as TraceStats'
// tracepipe.producers entries and reported by `tracepipe stats`.
type producerFaults struct {
	invalidPackets   uint64
	commitsMalformed uint64
	chunksDiscarded  uint64
	rejectedSeen     uint64 // SMB reader rejections already warned about
	died             uint64
	err              string // why it failed to start or died
	warned           bool
}

// producerFault warns, once per producer, that it misbehaved; what comes
// after is only counted (the counts are in the trace's stats).
func (s *Service) producerFault(p *producer, what string) {
	if p.faults.warned {
		return
	}
	p.faults.warned = true
	s.logf("%s sent %s; it is dropped and counted, further faults of this source are counted only (tracepipe stats TRACE)", p.label(), what)
}

// checkRejected warns about chunks the SMB reader refused since the last
// look (ABI violations: out-of-range indices, bad headers, bad fragments).
func (s *Service) checkRejected(p *producer) {
	if n := p.reader.Stats().TotalRejected(); n != p.faults.rejectedSeen {
		p.faults.rejectedSeen = n
		s.producerFault(p, "a chunk that violates the SMB ABI")
	}
}

// invalidPacket attributes a packet the readback rejected to its producer.
func (s *Service) invalidPacket(producerID uint16) {
	if producerID == 0 || int(producerID) > len(s.producers) {
		return
	}
	p := s.producers[producerID-1]
	p.faults.invalidPackets++
	s.producerFault(p, "an invalid packet (a trusted field set, or broken framing)")
}

// producerStats lists the producers that had faults, for TraceStats.
func (s *Service) producerStats() []tracefile.ProducerStats {
	var out []tracefile.ProducerStats
	for _, p := range s.producers {
		ps := tracefile.ProducerStats{
			Index:             uint64(p.index),
			Source:            p.source,
			InvalidPackets:    p.faults.invalidPackets,
			SMBChunksRejected: p.reader.Stats().TotalRejected(),
			CommitsMalformed:  p.faults.commitsMalformed,
			ChunksDiscarded:   p.faults.chunksDiscarded,
			Died:              p.faults.died,
			Error:             p.faults.err,
		}
		if side, ok := p.side.(stderrSuppressor); ok {
			ps.StderrLinesSuppressed = side.StderrLinesSuppressed()
		}
		if ps.Faulty() {
			out = append(out, ps)
		}
	}
	return out
}
