package buffer

// CloneReadOnly returns a snapshot that can only be read: same size,
// policy, contents up to UsedSize (reads already done on b stay done),
// cursors and sequence states. Its stats are b's with the read counters
// (bytes/chunks read, readaheads) reset; it has no writer histograms and no
// overwrite observer. Writes to the clone are counted as discarded chunks
// and patches fail. It is a one-shot copy on the Go heap, for tests and
// tools; a session clones with BeginClone into memory it maps itself, so
// that the copy is spread over time and given back to the OS when done.
func (b *TraceBuffer) CloneReadOnly() *TraceBuffer {
	c := b.cloneState(make([]byte, b.size))
	copy(c.mem, b.mem[:b.usedSize])
	return c
}

// cloneState returns the clone of everything but the memory contents,
// with mem as its memory (CloneReadOnly, BeginClone).
func (b *TraceBuffer) cloneState(mem []byte) *TraceBuffer {
	c := &TraceBuffer{
		mem:        mem,
		size:       b.size,
		policy:     b.policy,
		readOnly:   true,
		wr:         b.wr,
		usedSize:   b.usedSize,
		passStale:  true, // a read without BeginRead starts at the oldest record
		gen:        b.gen,
		discard:    b.discard,
		seqs:       make(map[uint32]*seqState, len(b.seqs)),
		writerHist: make(map[uint32]*histogram),
		pktSlices:  make([][]byte, 0, 4),
		stats:      b.stats,
	}
	for k, s := range b.seqs {
		cs := *s
		cs.ents = append([]seqEnt(nil), s.ents[s.head:]...)
		cs.head = 0
		cs.hist = nil
		c.seqs[k] = &cs
	}
	c.stats.BytesRead = 0
	c.stats.ChunksRead = 0
	c.stats.ReadaheadsFailed = 0
	c.stats.ReadaheadsSucceeded = 0
	return c
}
