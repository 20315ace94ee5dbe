package buffer

// Packet is one trace packet read back. Slices point into buffer memory
// (one per non-empty fragment) and stay valid until the next call that
// changes the buffer (reads included: they consume).
//
// A Packet whose Slices has no capacity (a zero Packet, one per read, as
// Perfetto builds a new packet per read) gets its Slices from a scratch
// array the buffer owns, so reading costs no allocation either way; that
// array is reused by the next read, so copy a packet (AppendTo) to keep it.
// A Packet whose Slices has capacity is filled in place.
type Packet struct {
	Slices [][]byte
	Seq    SequenceProperties
	// PreviousPacketDropped is a bitmask of internal/loss reasons for data lost on
	// this sequence before this packet (0: nothing lost).
	PreviousPacketDropped uint32
}

// Size returns the packet length in bytes.
func (p *Packet) Size() int {
	n := 0
	for _, s := range p.Slices {
		n += len(s)
	}
	return n
}

// AppendTo appends the packet bytes to dst.
func (p *Packet) AppendTo(dst []byte) []byte {
	for _, s := range p.Slices {
		dst = append(dst, s...)
	}
	return dst
}

// BeginRead starts a read pass at the oldest record.
func (b *TraceBuffer) BeginRead() {
	b.gen++
	b.rdrActive = false
	b.passStale = false
	b.rd = b.firstLive()
}

// oldest is where a read pass starts: just after the write cursor.
func (b *TraceBuffer) oldest() int {
	if b.wr == b.usedSize {
		return 0
	}
	return b.wr
}

// ReadNextTracePacket reads the next packet of the pass into p, reusing
// p.Slices. It returns false when the pass is over. Reads are destructive.
//
// The walk is two-layered: the outer layer visits records in buffer order
// (oldest first); for each it runs a sequence reader that yields that
// sequence's packets in chunk-id order up to the record. Packets of one
// sequence therefore come out in write order, and sequences interleave in
// roughly commit order.
func (b *TraceBuffer) ReadNextTracePacket(p *Packet) bool {
	if cap(p.Slices) != 0 {
		p.Slices = p.Slices[:0]
		return b.readNext(p)
	}
	p.Slices = b.pktSlices[:0]
	ok := b.readNext(p)
	if cap(p.Slices) > cap(b.pktSlices) {
		// A packet of many fragments grew the array: keep the larger one.
		b.pktSlices = p.Slices[:0]
	}
	return ok
}

// readNext is ReadNextTracePacket with p.Slices ready to append to.
func (b *TraceBuffer) readNext(p *Packet) bool {
	if b.passStale {
		// A write happened since the pass began: continue from the oldest
		// record instead of a cursor the write may have invalidated.
		b.passStale = false
		b.rdrActive = false
		b.rd = b.firstLive()
	}
	if b.rd < 0 {
		return false // no record is held by a sequence
	}
	for {
		var next int
		if !b.rdrActive {
			off := b.rd
			var s *seqState
			if pw := b.recPriWri(off); pw != 0 {
				s = b.lookupSeq(pw)
			}
			if s == nil || s.n() == 0 {
				next = off + b.recOuter(off)
			} else {
				b.rdr = seqReader{seq: s, target: off}
				b.initReader(&b.rdr)
				b.rdrActive = true
				continue
			}
		} else {
			if b.nextPacket(&b.rdr, &p.Slices) {
				s := b.rdr.seq
				p.Seq = s.props()
				p.PreviousPacketDropped = s.lossBits
				s.lossBits = 0
				return true
			}
			next = b.rdr.target + b.recOuter(b.rdr.target)
		}
		b.rdrActive = false
		wrapped := next >= b.usedSize
		if next == b.wr || (wrapped && b.wr == 0) {
			return false
		}
		if wrapped {
			b.rd = 0
		} else {
			b.rd = next
		}
	}
}

// firstLive is where a read pass starts: the first record, in walk order
// (from oldest), that a sequence still holds; -1 if none does. The walk
// skips the records before it anyway (read or erased records are padding:
// their writer id is 0), but a pass starting at oldest walked the headers
// of every record the ring still keeps after reading it, one cache and TLB
// miss per record: a pass per 8 MiB into a 512 MiB ring visited up to
// 130k records to read 2k. The sequences' records are few after a pass
// and packed in their ents, so finding the first is cheap.
func (b *TraceBuffer) firstLive() int {
	o := b.oldest()
	if b.usedSize > 0 {
		if pw := b.recPriWri(o); pw != 0 {
			if s := b.lookupSeq(pw); s != nil && s.n() > 0 {
				return o // unread data from the oldest record on (a backlog): no search
			}
		}
	}
	first, firstPos := -1, 0
	for _, s := range b.seqs {
		for _, e := range s.ents[s.head:] {
			off := int(e.off)
			pos := off - o // distance from oldest in walk order
			if off < o {
				pos += b.usedSize
			}
			if first < 0 || pos < firstPos {
				first, firstPos = off, pos
			}
		}
	}
	return first
}
