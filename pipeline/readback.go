package pipeline

import (
	"time"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/restore"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// batch is a run of stamped packets on its way to the sinks. Batches are
// recycled between the service goroutine and the output goroutine, so a
// steady-state read pass allocates nothing.
//
// The output goroutine offers each batch to every sink's lane as a
// sinks.Item (Packets built from data and ends, Pass marking the service
// packets, Stats the TraceStats each lane stamps with its own counters);
// the last lane to release it returns it to the free list.
type batch struct {
	sinks.Item
	data []byte // packets back to back
	ends []int  // end offset of each packet in data
	// endOfPass asks the lanes to flush their sinks after writing the
	// batch; final marks the session's last batch.
	endOfPass, final bool
	info             PassInfo // output totals once this batch is written
	// mem is the batch's share of the pool's mapping (empty, its
	// capacity batchMem), nil for a batch on the heap; data starts there
	// and moves to the heap only when a packet overshoots it. owner keeps
	// the mapping alive as long as a lane may still hold the batch.
	mem   []byte
	owner *buffer.Mem
}

func (b *batch) reset() {
	data := b.data[:0]
	if b.mem != nil {
		data = b.mem // back from the heap after an overshoot
	}
	b.data, b.ends, b.Packets, b.Pass = data, b.ends[:0], b.Packets[:0], b.Pass[:0]
	b.Stats, b.Flush, b.Final, b.Peers = nil, false, false, nil
	b.endOfPass, b.final = false, false
}

// full reports whether the batch reached its target size.
func (b *batch) full() bool { return len(b.data) >= readBatchTarget }

// batchFor returns the batch to append packets to, taking a free one if
// needed. wait says whether to wait for the output goroutine to free one
// (the final pass must write everything); otherwise nil means the sinks
// are behind and the pass should back off.
func (s *Service) batchFor(wait bool) *batch {
	if s.cur != nil && !s.cur.full() {
		return s.cur
	}
	if s.cur != nil {
		s.out <- s.cur
		s.cur = nil
	}
	if wait {
		s.cur = s.free.take()
	} else {
		s.cur = s.free.tryTake()
	}
	return s.cur
}

// submit hands the current batch (possibly empty, never nil) to the
// output stage with the end-of-pass marker.
func (s *Service) submit(final bool) {
	b := s.cur
	s.cur = nil
	b.endOfPass, b.final = true, final
	s.out <- b
}

// appendPacket adds a packet the service made itself; it passes every
// sink's filter.
func (b *batch) appendPacket(pkt []byte) {
	b.data = append(b.data, pkt...)
	b.ends = append(b.ends, len(b.data))
	b.Pass = append(b.Pass, true)
}

// emit adds a service packet built in s.scratch to b and keeps the
// scratch space (grown if the packet needed more) for the next one.
func (s *Service) emit(b *batch, pkt []byte) {
	b.appendPacket(pkt)
	s.scratch = pkt[:0]
}

// readPass reads every buffer (buffer by buffer, in config order) into
// output batches: service packets first, then buffer packets, validated
// and stamped with their trusted fields, then the stats packet when due.
//
// A non-final pass backs off when the output stage has no free batch (the
// sinks are behind): the data stays in the buffers, which is what makes a
// ring buffer wrap and count the loss instead of producers blocking. early
// marks a pass triggered by a filling buffer rather than by the timer.
func (s *Service) readPass(final, early bool) {
	b := s.batchFor(final)
	if b == nil { // only a non-final pass gets no batch
		if !early {
			s.counters.readbackDeferred++
		}
		return
	}
	s.appendPreamble(b)
	for _, bs := range s.buffers {
		if s.trig.timedOut {
			break // trigger_timeout: the session returns no data
		}
		if !final && bs.restore.HoldsReadback() {
			continue // its states come back with a snapshot (flightrec_transfer.go)
		}
		complete := true
		bs.buf.BeginRead()
		for {
			if b = s.batchFor(final); b == nil {
				complete = false
				break
			}
			if !bs.buf.ReadNextTracePacket(&s.pkt) {
				break
			}
			s.appendBufferPacket(b, bs, &s.pkt)
		}
		if complete {
			bs.unread = 0
		} else {
			if !early {
				s.counters.readbackDeferred++
			}
			return
		}
	}
	// The trailer goes into the current batch even when it is full
	// (batch sizes are a target, not a limit).
	if s.cur == nil {
		if final {
			s.cur = s.free.take()
		} else if s.cur = s.free.tryTake(); s.cur == nil {
			return // the next pass ends this one's output
		}
	}
	b = s.cur
	now := time.Now()
	if final {
		s.event(tracefile.EventReadTracingBuffersCompleted)
		s.appendEvents(b)
	}
	if final || now.Sub(s.lastStats) >= s.cfg.StatsPeriod {
		s.lastStats = now
		// Each lane appends this TraceStats with its own sink's
		// counters (sinks.Item.Stats).
		ts := s.traceStats()
		b.Stats, b.StatsUID, b.StatsTime = &ts, s.uid, bootNanos()
	}
	s.submit(final)
}

// appendBufferPacket validates one packet read from a buffer and appends
// it with the trusted fields the service stamps (trace-format.md §3).
func (s *Service) appendBufferPacket(b *batch, bs *bufferState, p *buffer.Packet) {
	start, ok := b.appendValid(p)
	if !ok {
		s.counters.invalidPackets++
		s.invalidPacket(p.Seq.ProducerID)
		return
	}
	b.stamp(bs.restore, p, start, s.sequenceID(bs, p.Seq.ProducerID, p.Seq.WriterID))
}

// appendValid appends p's bytes to b if they are a valid producer packet;
// start is where they begin. An invalid packet leaves b as it was.
func (b *batch) appendValid(p *buffer.Packet) (start int, ok bool) {
	start = len(b.data)
	b.data = p.AppendTo(b.data)
	if tracefile.ValidateProducerPacket(b.data[start:]) != nil {
		b.data = b.data[:start]
		return start, false
	}
	return start, true
}

// stamp ends the packet appendValid appended at start: a sequence state
// restore ahead of it when rs says so, then its trusted fields.
func (b *batch) stamp(rs *restore.Set, p *buffer.Packet, start int, seqID uint32) {
	tr := tracefile.Trusted{
		UID:                   p.Seq.Client.UID,
		SequenceID:            seqID,
		PID:                   p.Seq.Client.PID,
		HasPID:                true,
		PreviousPacketDropped: p.PreviousPacketDropped,
	}
	if rs != nil {
		if q := rs.Seq(p.Seq.ProducerID, p.Seq.WriterID); q != nil {
			b.data, b.ends, tr = rs.Ahead(b.data, b.ends, q, start, tr) // package restore
		}
	}
	b.data = tracefile.AppendTrusted(b.data, tr)
	b.ends = append(b.ends, len(b.data))
	b.Pass = append(b.Pass, false)
}

// sequenceID returns the trusted_packet_sequence_id of (producer, writer),
// assigning the next one (2, 3, ...) on first use and recording it in the
// buffer's provenance.
func (s *Service) sequenceID(bs *bufferState, producer, writer uint16) uint32 {
	key := uint32(producer)<<16 | uint32(writer)
	if bs.lastSeqKey == uint64(key)+1 {
		return bs.lastSeqID
	}
	id, ok := s.seqIDs[key]
	if !ok {
		id = s.nextSeqID
		s.nextSeqID++
		s.seqIDs[key] = id
	}
	if !bs.seqSeen[key] {
		bs.seqSeen[key] = true
		bs.provenance = append(bs.provenance, tracefile.ProvenanceSequence{ID: id, ProducerID: int32(producer)})
	}
	bs.lastSeqKey, bs.lastSeqID = uint64(key)+1, id
	return id
}
