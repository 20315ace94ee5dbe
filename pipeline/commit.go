package pipeline

import (
	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/smb"
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
	startFailures    uint64 // data sources that failed to start
	producersDied    uint64 // plugin processes that went away while recording
}

// handleCommit decodes one producer's CommitData (untrusted bytes, as if
// they came from another process), copies the chunks it names out of the
// SMB, applies its patches and records a flush acknowledgement.
func (s *Service) handleCommit(m commitMsg) {
	p := m.p
	defer s.commitHandled(p)
	if err := p.cd.Unmarshal(m.data); err != nil {
		s.counters.commitsMalformed++
		p.faults.commitsMalformed++
		s.producerFault(p, "a malformed CommitData")
		p.recycle(m.data)
		return
	}
	p.reader.ReadCommit(&p.cd, p.onChunk, p.onPatch)
	s.checkRejected(p)
	if id := p.cd.FlushRequestID; id != 0 {
		s.flushAcked(p, id)
	}
	p.recycle(m.data)
}

// commitHandled counts one of p's queued commits as handled and, for a
// dead producer waiting for its last commits, gives its SMB back.
func (s *Service) commitHandled(p *producer) {
	if p.queued.Add(-1) == 0 && p.releaseOnDrain {
		s.releaseSMB(p)
	}
}

// releaseSMB unmaps a dead producer's SMB and closes its descriptor once
// nothing can read it any more: its death-time scrape is done (scrape
// skips dead producers) and every commit it delivered was handled. Until
// the session ended, every restart of a crashing plugin kept its old SMB
// mapped (a 4 MiB SMB and a descriptor per kill in the chaos soak).
func (s *Service) releaseSMB(p *producer) {
	p.releaseOnDrain = false
	if err := p.smb.Close(); err != nil {
		s.logf("%s: releasing its shared memory buffer: %v", p.label(), err)
	}
}

// copyChunk moves one validated chunk into the producer's buffer.
func (s *Service) copyChunk(p *producer, v *smb.ChunkView) {
	bi := p.target
	if v.TargetBuffer != 0 && v.TargetBuffer != p.wire {
		// A producer may only write into the buffers of its data sources.
		s.counters.chunksDiscarded++
		p.faults.chunksDiscarded++
		s.producerFault(p, "a chunk for a buffer it may not write")
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
		// The buffer leaves out the last fragment of an incomplete chunk
		// (it may be half-written), as Perfetto's does with the raw SMB
		// count. The SMB reader left that fragment out already: count it
		// back, so that the last finished fragment is not dropped too.
		// For a chunk that is never committed (its writer died) that
		// fragment was a finished packet, lost without a count; or a
		// packet's end, whose beginning then stalled its sequence until
		// the ring overwrote it (chunks_overwritten).
		n++
	}
	b := s.buffers[bi]
	b.buf.CopyChunkUntrusted(p.id, p.trustedClient(), v.WriterID, v.ChunkID, n, v.Flags, v.Complete, payload)
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
	if c.TargetBuffer != 0 && c.TargetBuffer != p.wire {
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
// for the producers (reference/service.md §4 CompleteFlush). A dead
// producer's SMB is not scraped: scrapeDead salvaged it once, when the
// death was noticed, and nothing writes into it any more. Scraping it
// again would hand its half-written chunks to the buffer at every flush;
// once the first copy was read and erased (the ring wrapped over it) the
// buffer would count each further copy as chunks_discarded, a loss that
// is none.
func (s *Service) scrape() {
	for _, p := range s.producers {
		if p.state == stateDead {
			continue
		}
		p.scrapeSMB()
	}
}

// scrapeDead salvages what a producer that just died left in its SMB, as
// traced does when a producer disconnects (reference/service.md §2 step
// 6): the chunks it completed but did not commit, and the finished
// fragments of the chunks it was writing. It is the last look at that
// SMB: scrape skips dead producers. (Commits it sent before it died and
// still queued are handled later as usual; the SMB reader does not hand
// out again a chunk the scrape took whole.)
func (s *Service) scrapeDead(p *producer) {
	p.scrapeSMB()
	if p.quietWhenExited {
		// No commit is delivered after the death was noticed: release the
		// SMB now, or once the ones still queued are handled.
		p.releaseOnDrain = true
		if p.queued.Load() == 0 {
			s.releaseSMB(p)
		}
	}
}
