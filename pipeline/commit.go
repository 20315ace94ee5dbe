package pipeline

import (
	"time"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// counters are the service's own statistics (service goroutine only).
type counters struct {
	chunksDiscarded  uint64 // chunks aimed at a buffer the producer may not write
	patchesDiscarded uint64
	invalidPackets   uint64
	commitsMalformed uint64
	flushesRequested uint64
	flushesSucceeded uint64
	flushesFailed    uint64
	finalFlush       uint64 // tracefile.FlushOutcome*
	readbackDeferred uint64
	bytesIn          uint64 // chunk payload bytes copied into buffers
}

// handleCommit decodes one producer's CommitData (untrusted bytes, as if
// they came from another process), copies the chunks it names out of the
// SMB, applies its patches and records a flush acknowledgement.
func (s *Service) handleCommit(m commitMsg) {
	p := m.p
	if err := p.cd.Unmarshal(m.data); err != nil {
		s.counters.commitsMalformed++
		p.recycle(m.data)
		return
	}
	p.reader.ReadCommit(&p.cd, p.onChunk, p.onPatch)
	if id := p.cd.FlushRequestID; id != 0 && s.flush != nil {
		s.flush.ack(p, id)
		if s.flush.done() {
			s.completeFlush(true)
		}
	}
	p.recycle(m.data)
}

// copyChunk moves one validated chunk into the producer's buffer.
func (s *Service) copyChunk(p *producer, v *smb.ChunkView) {
	bi := p.target
	if v.TargetBuffer != 0 && int(v.TargetBuffer) != p.target+1 {
		// A producer may only write into the buffers of its data sources.
		s.counters.chunksDiscarded++
		return
	}
	payload, n := v.Payload, v.Fragments
	if v.Aborted {
		// Hand the buffer the drop sentinel too, so that it counts the
		// writer's loss and flags the sequence (trace_writer_packet_loss).
		payload, n = v.WithSentinel, n+1
	}
	if !v.Complete {
		// A scraped chunk may be committed again, bigger: reserve the
		// whole chunk in the buffer (zeros past the finished fragments,
		// which are all the SMB reader lets us read).
		p.scrapeBuf = append(p.scrapeBuf[:0], payload...)
		p.scrapeBuf = append(p.scrapeBuf, make([]byte, max(v.PayloadCapacity-len(payload), 0))...)
		payload = p.scrapeBuf
	}
	b := s.buffers[bi]
	b.buf.CopyChunkUntrusted(p.id, p.client, v.WriterID, v.ChunkID, n, v.Flags, v.Complete, payload)
	s.counters.bytesIn += uint64(len(payload))
	b.unread += len(payload)
	if s.cfg.WriteIntoFile && b.unread >= min(b.buf.Size()/8, earlyReadBytes) {
		// Read before the ring wraps over unread data, instead of
		// waiting for the next file_write_period.
		s.readSoon = true
	}
}

// patchChunk applies one ChunkToPatch entry to the producer's buffer.
func (s *Service) patchChunk(p *producer, c *smb.ChunkToPatch) {
	s.counters.patchesDiscarded += uint64(c.DiscardedPatches)
	if c.TargetBuffer != 0 && int(c.TargetBuffer) != p.target+1 {
		s.counters.patchesDiscarded += uint64(len(c.Patches))
		return
	}
	p.patches = p.patches[:0]
	for _, pt := range c.Patches {
		p.patches = append(p.patches, buffer.Patch{Offset: pt.Offset, Data: pt.Data})
	}
	// A failed patch is counted by the buffer (patches_failed).
	s.buffers[p.target].buf.TryPatchChunkContents(p.id, c.WriterID, c.ChunkID, p.patches, c.HasMorePatches)
}

// scrape copies the chunks still sitting in every producer's SMB
// (completed but not yet committed, or being written), without waiting
// for the producers (reference/service.md §4 CompleteFlush).
func (s *Service) scrape() {
	for _, p := range s.producers {
		p.reader.Scrape(p.onChunk)
	}
}

// pendingFlush is the flush in progress.
type pendingFlush struct {
	id      uint64
	waiting map[*producer]bool
	timer   *time.Timer
	done_   chan bool // non-nil for the final flush: receives the outcome
}

func (f *pendingFlush) ack(p *producer, id uint64) {
	if id >= f.id {
		delete(f.waiting, p)
	}
}

func (f *pendingFlush) done() bool { return len(f.waiting) == 0 }

// startFlush asks every producer to commit what it holds. Only one flush
// runs at a time: a periodic flush due while one is pending is skipped.
func (s *Service) startFlush(result chan bool) bool {
	if s.flush != nil {
		return false
	}
	s.flushID++
	s.counters.flushesRequested++
	s.event(tracefile.EventFlushStarted)
	f := &pendingFlush{id: s.flushID, waiting: map[*producer]bool{}, timer: time.NewTimer(s.cfg.FlushTimeout), done_: result}
	for _, p := range s.running {
		if p.request(ctrlMsg{kind: ctrlFlush, flushID: f.id}) {
			f.waiting[p] = true
		}
	}
	s.flush = f
	if f.done() {
		s.completeFlush(true)
	}
	return true
}

// completeFlush ends the pending flush: the SMBs are scraped so nothing
// still in them is missed, and the outcome is counted.
func (s *Service) completeFlush(ok bool) {
	f := s.flush
	if f == nil {
		return
	}
	s.flush = nil
	f.timer.Stop()
	ok = ok && f.done()
	s.scrape()
	s.event(tracefile.EventAllDataSourcesFlushed)
	if ok {
		s.counters.flushesSucceeded++
	} else {
		s.counters.flushesFailed++
	}
	if f.done_ != nil {
		f.done_ <- ok
	}
}

// finalFlush flushes every producer and waits for the outcome while
// still serving commits (which carry the acknowledgements).
func (s *Service) finalFlush() bool {
	if s.flush != nil {
		// Let the pending periodic flush end first.
		s.waitFlush(nil)
	}
	result := make(chan bool, 1)
	s.startFlush(result)
	return s.waitFlush(result)
}

// waitFlush serves commits until the pending flush completes.
func (s *Service) waitFlush(result chan bool) bool {
	for s.flush != nil {
		select {
		case m := <-s.commits:
			s.handleCommit(m)
		case <-s.flush.timer.C:
			s.completeFlush(false)
		}
	}
	if result == nil {
		return true
	}
	return <-result
}

// stopProducers stops every data source (concurrently, each on its own
// control goroutine) while serving their last commits, bounded by
// stopTimeout.
func (s *Service) stopProducers() {
	type stopped struct {
		p   *producer
		err error
	}
	results := make(chan stopped, len(s.running))
	pending := 0
	for _, p := range s.running {
		done := make(chan error, 1)
		select {
		case p.ctrl <- ctrlMsg{kind: ctrlStop, done: done}:
		case <-time.After(stopTimeout):
			s.logf("data_sources[%d] (%s): control queue stuck; not stopped", p.index, p.name)
			continue
		}
		pending++
		go func(p *producer) { results <- stopped{p, <-done} }(p)
	}
	deadline := time.NewTimer(stopTimeout)
	defer deadline.Stop()
	for pending > 0 {
		select {
		case m := <-s.commits:
			s.handleCommit(m)
		case r := <-results:
			pending--
			if r.err != nil {
				s.logf("data_sources[%d] (%s): stop: %v", r.p.index, r.p.name, r.err)
			}
		case <-deadline.C:
			for _, p := range s.running {
				select {
				case <-p.ctrlDone:
				default:
					s.logf("data_sources[%d] (%s): %v (after %v); its SMB is scraped as it is", p.index, p.name, errStopTimeout, stopTimeout)
					p.dataSourceErrs.Add(1)
				}
			}
			pending = 0
		}
	}
}

// drainCommits serves every commit already queued.
func (s *Service) drainCommits() {
	for {
		select {
		case m := <-s.commits:
			s.handleCommit(m)
		default:
			return
		}
	}
}
