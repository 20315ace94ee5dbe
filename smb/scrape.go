package smb

// Scrape hands out, without waiting for the producer and without changing
// any chunk state, every chunk that is BeingWritten or Complete (committed
// or not): the data a flush must not lose. A Complete chunk is reported
// whole with Complete = true, and only once: a later scrape skips it, and
// when its commit arrives ReadCommit frees it without handing it out
// again. (Perfetto copies it twice; its trace buffer counts the second
// copy as chunks_discarded, data loss, when the first was already read.)
// A BeingWritten chunk is reported with Complete = false and without its
// last counted fragment, which may still be changing; one with fewer than
// two counted fragments is skipped. Only the bytes of finished fragments
// are read, after an atomic load of the header's packets word, so
// scraping never races with the writer.
//
// The walk goes page by page while the producer writes on, so a writer
// can finish a chunk the walk has passed (skipped then: nothing finished
// in it) and go on in one the walk has not reached. Handing out the later
// chunk alone would leave a hole the trace buffer reads past, and the
// earlier chunk's commit would then be discarded as stale: lost packets.
// So a second walk hands out every Complete chunk of a writer older than
// the newest chunk of that writer the first walk handed out; such a chunk
// is Complete by then, because a writer returns a chunk before it writes
// into the next one, and only this goroutine frees chunks.
//
// The header of a chunk being written is read packets word first, then
// chunk_id, as Perfetto does. Freeing a chunk zeroes its header, and a
// writer acquiring it stores chunk_id before the writer_id/packets word,
// so a packets word that counts two fragments proves the chunk_id stored
// with it is visible. Read the other way round, a scrape preempted
// between the two loads of a just-reacquired chunk pairs the zero chunk_id
// of the free chunk with the new chunk's count: it handed the writer's
// new chunk out as its chunk 0, which rewrote an unread chunk 0 in the
// trace buffer (packets lost, uncounted) or was discarded as stale
// (chunks_discarded): the starved-service losses of
// TestServiceSIGKILLRandomMomentsRotating, forced in
// TestScrapeTornHeaderOfReusedChunk.
//
// Scrape must run on the same goroutine as ReadCommit.
func (r *Reader) Scrape(onChunk func(*ChunkView)) {
	r.newest = r.newest[:0]
	r.scrapeWalk(onChunk, false)
	if len(r.newest) > 0 {
		r.scrapeWalk(onChunk, true)
	}
}

// newestScraped is, for one writer, the newest chunk id a scrape's first
// walk handed out.
type newestScraped struct {
	writer uint16
	id     uint32
}

// noteScraped records that the first walk handed out chunk id of writer.
func (r *Reader) noteScraped(writer uint16, id uint32) {
	for i := range r.newest {
		if n := &r.newest[i]; n.writer == writer {
			if int32(n.id-id) < 0 {
				n.id = id
			}
			return
		}
	}
	r.newest = append(r.newest, newestScraped{writer, id})
}

// behindScraped reports whether chunk id of writer is older than the
// newest chunk of that writer the first walk handed out.
func (r *Reader) behindScraped(writer uint16, id uint32) bool {
	for _, n := range r.newest {
		if n.writer == writer {
			return int32(id-n.id) < 0
		}
	}
	return false
}

// scrapeWalk is one walk over the SMB. The first (holes false) hands out
// what Scrape promises; the second (holes true) only the Complete chunks
// behind a writer's newest scraped chunk that are not handed out yet.
func (r *Reader) scrapeWalk(onChunk func(*ChunkView), holes bool) {
	s := r.smb
	for p := range s.NumPages() {
		bm := s.PageBitmap(p)
		if bm == 0 {
			continue
		}
		yieldAt(siteScrapeState)
		l := LayoutOf(bm)
		for i := range l.NumChunks() {
			st := StateOf(bm, i)
			if st != ChunkBeingWritten && st != ChunkComplete {
				continue
			}
			complete := st == ChunkComplete
			if holes && !complete {
				continue
			}
			chunk := s.chunkBytes(p, l, i)
			// The packets word first, then chunk_id (see Scrape).
			word := load32(chunk, 4)
			yieldAt(siteScrapeHeader)
			id := load32(chunk, 0)
			yieldAt(siteScrapeChunkID)
			h := DecodeHeaderWords(id, word)
			if complete && r.wasScraped(uint32(p), i, h) {
				continue // handed out whole by an earlier scrape
			}
			if holes && !r.behindScraped(h.WriterID, h.ChunkID) {
				continue // newer than the first walk: the next scrape or its commit
			}
			count := int(h.Count)
			if !complete {
				if count < 2 {
					r.stats.ScrapeSkipped++
					continue
				}
				count--
			}
			if !r.fill(h, chunk[ChunkHeaderSize:], count, complete) {
				continue
			}
			if complete {
				r.markScraped(uint32(p), i, h)
			}
			if !holes {
				r.noteScraped(h.WriterID, h.ChunkID)
			} else {
				r.stats.ScrapeHolesFilled++
			}
			v := &r.view
			v.Page, v.Index = uint32(p), i
			r.stats.ChunksScraped++
			r.stats.PayloadBytes += uint64(len(v.Payload))
			if onChunk != nil {
				onChunk(v)
			}
			v.Payload = nil
			yieldAt(siteScrapeCopied)
		}
	}
}
