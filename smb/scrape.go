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
// Scrape must run on the same goroutine as ReadCommit.
func (r *Reader) Scrape(onChunk func(*ChunkView)) {
	s := r.smb
	for p := range s.NumPages() {
		bm := s.PageBitmap(p)
		if bm == 0 {
			continue
		}
		l := LayoutOf(bm)
		for i := range l.NumChunks() {
			st := StateOf(bm, i)
			if st != ChunkBeingWritten && st != ChunkComplete {
				continue
			}
			chunk := s.chunkBytes(p, l, i)
			h := DecodeHeaderWords(load32(chunk, 0), load32(chunk, 4))
			complete := st == ChunkComplete
			if complete && r.wasScraped(uint32(p), i, h) {
				continue // handed out whole by an earlier scrape
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
			v := &r.view
			v.Page, v.Index = uint32(p), i
			r.stats.ChunksScraped++
			r.stats.PayloadBytes += uint64(len(v.Payload))
			if onChunk != nil {
				onChunk(v)
			}
			v.Payload = nil
		}
	}
}
