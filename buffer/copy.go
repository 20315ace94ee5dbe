package buffer

import "github.com/tracepipe/tracepipe/internal/loss"

// CopyChunkUntrusted copies one SMB chunk payload (the bytes after the
// 8-byte SMB chunk header) into the buffer. producer and client are trusted;
// everything else comes from the producer and is validated: malformed
// chunks are counted in Stats.AbiViolations and their valid prefix is kept.
//
// complete is false for chunks copied by SMB scraping: their last fragment
// may still be half-written, so it is ignored and the chunk can later be
// committed again, complete and possibly bigger.
//
// On a read-only clone the call only counts a discarded chunk.
func (b *TraceBuffer) CopyChunkUntrusted(producer uint16, client ClientIdentity, writer uint16,
	chunkID uint32, numFragments uint16, flags uint8, complete bool, payload []byte) {
	b.passStale = true
	if b.readOnly || b.discard {
		b.stats.ChunksDiscarded++
		return
	}
	flags &^= flagIncomplete
	if !complete {
		flags |= flagIncomplete
		if numFragments > 0 {
			numFragments--
			flags &^= flagLastContinues | flagNeedsPatching
		}
	}

	// Measure the valid fragments. Their headers are a chain of dependent
	// loads through the producer's chunk, which is rarely in this core's
	// cache (another process wrote it); loading every line first, with
	// independent loads, takes those misses in parallel, and the copy
	// below then finds the bytes in cache.
	if len(payload) > 0 {
		b.warmSink = touchLines(payload)
	}
	allFrags := 0
	sawDrop := false
	var aux uint8
	for i := 0; i < int(numFragments); i++ {
		data, end := shortFragment(payload, allFrags)
		st := tokOK
		if data == 0 || end > len(payload) {
			data, end, st = nextFragment(payload, allFrags)
		}
		if st != tokOK {
			if st == tokDrop {
				sawDrop = true
			} else {
				b.stats.AbiViolations++
			}
			break
		}
		if end > data {
			aux = auxHasPacket
		}
		allFrags = end
	}

	capacity := allFrags
	if !complete {
		capacity = len(payload)
	}
	if capacity > maxRecordCap || outerSize(capacity) > len(b.mem) {
		b.stats.AbiViolations++
		return
	}

	key := seqKey(producer, writer)
	s := b.lookupSeq(key)
	if s == nil {
		s = &seqState{producer: producer, writer: writer, client: client}
		b.seqs[key] = s
		b.cacheKey, b.cacheSeq = key, s
	}
	if s.hist == nil {
		s.hist = b.writerHist[key]
		if s.hist == nil {
			s.hist = &histogram{}
			b.writerHist[key] = s.hist
		}
	}
	s.hist.add(allFrags)

	if sawDrop {
		b.stats.TraceWriterPacketLoss++
		s.addLoss(loss.WriterAbort)
	}

	// Stale check: was this chunk already consumed?
	prevConsumed := 0
	if s.last.set {
		l := s.last
		if chunkID == l.id && l.wasIncomplete && int(l.payloadSize) < allFrags {
			prevConsumed = int(l.payloadSize) // re-admit a grown scraped chunk
		} else if !idBefore(l.id, chunkID) {
			b.stats.ChunksDiscarded++
			return
		}
	}

	if pos, same := s.findFromBack(chunkID); same {
		relocated, consumed := b.recommit(s, pos, flags, aux, complete, allFrags, payload)
		if !relocated {
			return
		}
		prevConsumed = consumed
	}
	b.write(s, key, chunkID, flags, aux, capacity, allFrags, prevConsumed, payload)
}

// recommit handles a chunk id that is still in the buffer (an SMB-scraped
// chunk committed again). It rewrites the record in place, rejects the
// commit, or erases the record so the caller writes it anew at the write
// cursor (relocated, with consumed bytes already delivered).
func (b *TraceBuffer) recommit(s *seqState, pos int, flags, aux uint8, complete bool, allFrags int,
	payload []byte) (relocated bool, consumed int) {
	off := int(s.at(pos).off)
	exFlags := b.recFlags(off)
	exPayload := b.recPayload(off)
	exAvail := b.recAvail(off)
	if allFrags < exPayload || allFrags > b.recCap(off) || exFlags&flagABIMask&^flags != 0 {
		b.stats.AbiViolations++
		return false, 0
	}
	if exFlags&flagIncomplete != 0 && exAvail == 0 && complete && allFrags > exPayload &&
		pos == 0 && b.policy == RingBuffer {
		b.stats.ChunksRelocated++
		b.eraseFront(s)
		return true, exPayload
	}
	b.guard(off, hdrSize+allFrags)
	if complete {
		exFlags &^= flagIncomplete
		b.mem[off+hdrFlags] = exFlags
	}
	if allFrags == exPayload {
		return false, 0
	}
	done := exPayload - exAvail
	put16(b.mem, off+hdrPayload, uint16(allFrags))
	put16(b.mem, off+hdrAvail, uint16(allFrags-done))
	copy(b.mem[off+hdrSize:off+hdrSize+allFrags], payload[:allFrags])
	b.mem[off+hdrFlags] = exFlags | flags
	b.mem[off+hdrAux] = aux
	b.stats.ChunksRewritten++
	return false, 0
}

// write stores a new record at the write cursor, making room first.
func (b *TraceBuffer) write(s *seqState, key, chunkID uint32, flags, aux uint8, capacity, allFrags,
	prevConsumed int, payload []byte) {
	outer := outerSize(capacity)
	size := len(b.mem)
	if outer > size-b.wr {
		if b.policy == Discard {
			b.discard = true
			b.stats.ChunksDiscarded++
			return
		}
		if size-b.wr > 0 {
			b.guard(b.wr, size-b.wr)
			b.deleteNextChunksFor(size - b.wr)
		}
		b.wr = 0
		b.stats.WriteWrapCount++
	}
	b.guard(b.wr, outer+hdrSize) // the records written over and a padding header after them
	if b.wr < b.usedSize {
		b.deleteNextChunksFor(outer)
	}

	pos, _ := s.findFromBack(chunkID)
	wr := b.wr
	b.writeHeader(wr, chunkID, key, capacity, allFrags, allFrags-prevConsumed, flags, aux)
	copy(b.mem[wr+hdrSize:wr+hdrSize+allFrags], payload[:allFrags])
	if end := wr + outer; end > b.usedSize {
		b.usedSize = end
	}
	if pos != s.n() {
		b.stats.ChunksCommittedOutOfOrder++
	}
	if s.n() == 0 && s.last.set {
		b.emptySeqs-- // it was counted empty when its last record was erased
	}
	s.insertAt(pos, seqEnt{off: uint32(wr), id: chunkID})
	b.wr = wr + outer
	b.stats.ChunksWritten++
	b.stats.BytesWritten += uint64(outer)
	b.gcEmptySequences()
}

// eraseSimple is the fast path of an overwrite when nobody observes the
// deleted packets: if the record at off is the first of its sequence,
// untouched since its copy (no patch, nothing consumed) and cannot hold
// fragmented packets, the erase-mode walk would consume exactly its
// fragments, all whole packets; its outcome is known without reading them.
// It reports false, doing nothing, when the general walk is needed.
func (b *TraceBuffer) eraseSimple(s *seqState, off, outer int) bool {
	h := b.wholePacketsFront(s, off)
	if h == nil {
		return false
	}
	avail := le16(h, hdrAvail)
	if avail != le16(h, hdrPayload) {
		return avail == 0 && b.eraseConsumed(s)
	}
	r := seqReader{seq: s, target: off, erase: true}
	b.initReader(&r)
	if avail > 0 {
		b.guard(off, hdrSize)
		put16(h, hdrAvail, 0)
		b.stats.ChunksOverwritten++
		b.stats.BytesOverwritten += uint64(outer)
	}
	if h[hdrAux]&auxHasPacket != 0 {
		s.addLoss(loss.Overwrite)
	}
	b.eraseFront(s)
	return true
}

// wholePacketsFront returns the header of the record at off if the
// overwrite fast paths may take it: it is the first record of s, holds only
// whole packets (no fragment continues from or into another chunk) and was
// not patched since its copy measured its fragments. Otherwise nil.
func (b *TraceBuffer) wholePacketsFront(s *seqState, off int) []byte {
	if int(s.front().off) != off {
		return nil
	}
	h := b.mem[off : off+hdrSize]
	if h[hdrFlags]&(flagFirstContinues|flagLastContinues) != 0 || h[hdrAux]&auxPatched != 0 {
		return nil
	}
	return h
}

// eraseObserved is the fast path of an observed overwrite: for a record
// that eraseSimple would take (first of its sequence, untouched since its
// copy, no fragmented packet, not patched), the erase-mode walk hands every
// non-empty fragment to the observer as a one-slice packet, in order, and
// consumes the record. That is done here in one tight pass; the fragments
// tokenize cleanly because the copy measured them. It reports false, doing
// nothing, when the general walk is needed.
func (b *TraceBuffer) eraseObserved(s *seqState, off, outer int) bool {
	h := b.wholePacketsFront(s, off)
	if h == nil {
		return false
	}
	avail := le16(h, hdrAvail)
	if avail != le16(h, hdrPayload) {
		return false
	}
	r := seqReader{seq: s, target: off, erase: true}
	b.initReader(&r)
	p := b.mem[off+hdrSize : off+hdrSize+int(avail)]
	b.warm(off+hdrSize, off+hdrSize+len(p))
	props := s.props()
	pkt := append(b.erasePkt[:0], nil)
	produced := false
	for start := 0; start < len(p); {
		data, end := shortFragment(p, start)
		st := tokOK
		if data == 0 || end > len(p) {
			data, end, st = nextFragment(p, start)
		}
		if st != tokOK {
			// Not reachable for a record measured at copy time and never
			// patched; leave the rest to the general walk, as if it had
			// walked this far itself.
			b.guard(off, hdrSize)
			put16(h, hdrAvail, uint16(len(p)-start))
			if produced {
				s.addLoss(loss.Overwrite)
			}
			return false
		}
		if end > data {
			pkt[0] = p[data:end]
			b.observer(props, pkt)
			produced = true
		}
		start = end
	}
	b.erasePkt = pkt
	if avail > 0 {
		b.guard(off, hdrSize)
		put16(h, hdrAvail, 0)
		b.stats.ChunksOverwritten++
		b.stats.BytesOverwritten += uint64(outer)
	}
	if produced {
		s.addLoss(loss.Overwrite)
	}
	b.eraseFront(s)
	return true
}

// eraseConsumed erases the fully consumed first record of s: the walk would
// find no fragment and erase it.
func (b *TraceBuffer) eraseConsumed(s *seqState) bool {
	r := seqReader{seq: s, target: int(s.front().off), erase: true}
	b.initReader(&r)
	b.eraseFront(s)
	return true
}

// eraseFront turns the first record of s into padding and remembers it as
// the sequence's last consumed chunk.
func (b *TraceBuffer) eraseFront(s *seqState) {
	e := s.front()
	off := int(e.off)
	s.last = consumedChunk{id: e.id, payloadSize: uint16(b.recPayload(off)),
		wasIncomplete: b.recFlags(off)&flagIncomplete != 0, set: true}
	b.guard(off, hdrSize)
	put32(b.mem, off+hdrPriWriID, 0)
	s.popFront()
	if s.n() == 0 {
		b.emptySeqs++
		b.ageClock++
		s.ageForGC = b.ageClock
	}
}

// deleteNextChunksFor frees [wr, wr+n) for a write (ring-buffer policy).
// Records there are drained in sequence order first, exactly like a read,
// so their packets reach the overwrite observer and losses are recorded.
func (b *TraceBuffer) deleteNextChunksFor(n int) {
	end := b.wr + n
	off := b.wr
	b.prefetchRange(off, end)
	for off < end && off < b.usedSize {
		outer := b.recOuter(off)
		pw := b.recPriWri(off)
		if pw == 0 {
			b.stats.PaddingBytesCleared += uint64(outer)
			off += outer
			continue
		}
		s := b.seqs[pw]
		if s == nil || s.n() == 0 {
			// Unreachable while sequences with records are never
			// collected; erase defensively rather than loop.
			b.guard(off, hdrSize)
			put32(b.mem, off+hdrPriWriID, 0)
			off += outer
			continue
		}
		if !b.generalWalkOnly {
			if b.observer == nil && b.eraseSimple(s, off, outer) {
				off += outer
				continue
			}
			if b.observer != nil && b.eraseObserved(s, off, outer) {
				off += outer
				continue
			}
		}
		r := seqReader{seq: s, target: off, erase: true}
		b.initReader(&r)
		produced := false
		for b.nextPacket(&r, &b.erasePkt) {
			produced = true
			if b.observer != nil {
				b.observer(s.props(), b.erasePkt)
			}
		}
		if produced {
			s.addLoss(loss.Overwrite)
		}
		off += outer
	}
	// A record straddling the end of the range leaves a padding tail.
	off = b.wr
	for off < end && off < b.usedSize {
		rend := off + b.recOuter(off)
		if rend > end {
			b.guard(end, hdrSize)
			b.writePadding(end, rend-end)
			b.stats.PaddingBytesWritten += uint64(rend - end)
			break
		}
		off = rend
	}
}
