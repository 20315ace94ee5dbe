package smb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// WriterStats counts what a TraceWriter lost or noticed.
type WriterStats struct {
	// PacketsDropped counts packets lost because the SMB had no free chunk.
	PacketsDropped uint64
	// ChunksAcquired counts chunks taken from the SMB.
	ChunksAcquired uint64
	// ReturnRaces counts returned chunks that were not BeingWritten any
	// more (only a misbehaving service causes this).
	ReturnRaces uint64
}

// ErrWriterClosed is returned by a TraceWriter used after Close.
var ErrWriterClosed = errors.New("smb: trace writer is closed")

type slotKind uint8

const (
	slotNone    slotKind = iota // size goes nowhere (garbage area)
	slotInChunk                 // size goes into the current chunk at buf[slot]
	slotPatch                   // size goes into patch list entry slot (absolute index)
)

// frame is one open nested message of the current packet.
type frame struct {
	start int // logical packet offset of the message's first content byte
	slot  int
	kind  slotKind
}

type pendingPatch struct {
	chunkID uint32
	offset  uint32 // payload-relative
	data    [4]byte
	patched bool
}

// TraceWriter writes one sequence of TracePackets into an SMB. Packets are
// framed, fragmented across chunks, size-patched and committed as
// Perfetto's TraceWriterImpl does. A TraceWriter must be used by one
// goroutine at a time. It satisfies plugins.PacketWriter.
type TraceWriter struct {
	arb    *Arbiter
	id     uint16
	target uint32
	policy BufferExhaustedPolicy

	// Current chunk, or the garbage area while dropping.
	buf         []byte
	word        *uint32 // the chunk's writer_id|packets header word
	wp          int     // write offset in buf
	hasChunk    bool
	page        int
	idx         uint32
	chunkID     uint32
	nextChunkID uint32
	count       uint16
	flags       uint8
	inflated    bool // count already includes the next packet's fragment
	reachedMax  bool // the chunk holds MaxPacketsPerChunk packets

	// Current packet.
	inPacket   bool
	fragmented bool // the packet crossed into another chunk
	fragHdr    int  // offset in buf of the current fragment's 4-byte size
	fragStart  int  // offset in buf of the current fragment's first byte
	posBase    int  // posBase+wp = bytes of the packet written so far
	// frames: the root's (always zero) and the open nested messages';
	// one long between packets.
	frames []frame
	// shift is 0, or compactRoot / compactNested while the packet is
	// written compact-first (compact.go): wp is then that many bytes
	// behind where the 4-byte layout would have it; every other field
	// holds its 4-byte-layout value, except fragStart and posBase, and the
	// one nested message's frame, only nestedSlot (its 4-byte-layout
	// slot): expand sets them.
	shift      int
	nestedSlot int
	// normalLayoutOnly turns compact-first writing off, so tests can hold
	// it against the 4-byte layout.
	normalLayoutOnly bool
	packetGen        uint32
	// top is the key (msgKey) of the innermost open message, or noMessage
	// between packets: a Message writing to it needs no further checks.
	top uint64
	err error

	dropping    bool // writing into garbage
	lostPackets bool // flag the next packet with previous_packet_dropped
	firstPacket bool
	closed      bool

	patchStore []pendingPatch // entries [patchHead:] are pending
	patchHead  int
	patchBase  int // absolute index of patchStore[0]

	garbage []byte
	stats   writerCounters
}

func newTraceWriter(a *Arbiter, id uint16, target uint32, policy BufferExhaustedPolicy) *TraceWriter {
	return &TraceWriter{arb: a, id: id, target: target, policy: policy, firstPacket: true,
		frames: make([]frame, 1, 16), top: noMessage}
}

// ID is the writer id (1..32767) the arbiter allocated.
func (w *TraceWriter) ID() uint16 { return w.id }

// TargetBuffer is the buffer id every chunk of this writer is committed to.
func (w *TraceWriter) TargetBuffer() uint32 { return w.target }

// Stats returns the writer's counters. Unlike the other methods it may be
// called from any goroutine.
func (w *TraceWriter) Stats() WriterStats {
	return WriterStats{
		PacketsDropped: w.stats.dropped.Load(),
		ChunksAcquired: w.stats.acquired.Load(),
		ReturnRaces:    w.stats.returnRaces.Load(),
	}
}

// writerCounters back WriterStats. They are atomic so that the service
// can read a writer's losses while the writer's goroutine writes; the
// writer touches them once per chunk or per lost packet, not per packet.
type writerCounters struct {
	dropped, acquired, returnRaces atomic.Uint64
}

func (w *TraceWriter) publish() {
	atomic.StoreUint32(w.word, HeaderWord(w.id, w.count, w.flags))
	yieldAt(sitePublished)
}

// install makes chunk (already BeingWritten with its header stored) the
// current chunk.
func (w *TraceWriter) install(page int, idx uint32, chunk []byte, count uint16, flags uint8) {
	w.buf, w.word = chunk, word32(chunk, 4)
	w.page, w.idx, w.hasChunk = page, idx, true
	w.chunkID = w.nextChunkID
	w.nextChunkID++
	w.count, w.flags = count, flags
	w.inflated, w.reachedMax = false, false
	w.wp = ChunkHeaderSize
	w.stats.acquired.Add(1)
}

// returnChunk hands the current chunk back to the arbiter, first writing
// the zero-length fragment an inflated count promised.
func (w *TraceWriter) returnChunk() {
	if w.inflated {
		w.buf[w.wp] = 0
		w.wp++
		w.inflated = false
	}
	w.publish()
	w.hasChunk = false
	w.arb.returnChunk(w)
}

func (w *TraceWriter) enterDrop() {
	w.dropping, w.hasChunk, w.inflated = true, false, false
	if w.garbage == nil {
		w.garbage = make([]byte, max(w.arb.layout.ChunkSize(w.arb.smb.PageSize()), MinPageSize))
	}
	w.buf, w.wp = w.garbage, 0
}

// startChunk returns the current chunk (if any) and acquires a fresh one
// for a new packet; on failure the writer drops.
func (w *TraceWriter) startChunk() {
	if w.hasChunk {
		w.returnChunk()
	}
	h := ChunkHeader{ChunkID: w.nextChunkID, WriterID: w.id}
	policy := w.policy
	if w.dropping {
		policy = Drop // a writer that already timed out does not stall again until it recovers
	}
	p, c, chunk, err := w.arb.acquire(h, policy)
	if err != nil {
		if policy == Stall {
			w.err = err
		}
		w.enterDrop()
		return
	}
	w.dropping = false
	w.install(p, c, chunk, 0, 0)
}

// nextBuffer is called when the current packet needs more room than the
// chunk has: the fragment is closed with its size and
// LastPacketContinuesOnNextChunk, the size slots of still-open nested
// messages move to the patch list, and the packet continues in a new chunk
// with FirstPacketContinuesFromPrevChunk. The new chunk is acquired before
// the old one is returned so that, if none is free, the old fragment can
// still be marked with the drop sentinel.
func (w *TraceWriter) nextBuffer() {
	pos := w.posBase + w.wp
	if w.dropping {
		w.posBase, w.wp = pos, 0
		return
	}
	h := ChunkHeader{ChunkID: w.nextChunkID, WriterID: w.id, Count: 1, Flags: FlagFirstPacketContinuesFromPrevChunk}
	p, c, chunk, err := w.arb.acquire(h, w.policy)
	if err != nil {
		if w.policy == Stall {
			w.err = err
		}
		PutRedundantVarint(w.buf[w.fragHdr:], DropPacketSize)
		for i := range w.frames {
			if w.frames[i].kind == slotInChunk {
				w.frames[i].kind = slotNone
			}
		}
		w.returnChunk()
		w.enterDrop()
		w.posBase = pos
		return
	}
	PutRedundantVarint(w.buf[w.fragHdr:], uint32(w.wp-w.fragStart))
	w.flags |= FlagLastPacketContinuesOnNextChunk
	for i := 1; i < len(w.frames); i++ {
		f := &w.frames[i]
		if f.kind != slotInChunk {
			continue
		}
		w.patchStore = append(w.patchStore, pendingPatch{chunkID: w.chunkID, offset: uint32(f.slot - ChunkHeaderSize)})
		f.kind, f.slot = slotPatch, w.patchBase+len(w.patchStore)-1
		w.flags |= FlagChunkNeedsPatching
	}
	w.returnChunk()
	w.install(p, c, chunk, 1, FlagFirstPacketContinuesFromPrevChunk)
	w.fragmented = true
	w.fragHdr = w.wp
	clear(w.buf[w.wp : w.wp+PacketHeaderSize])
	w.wp += PacketHeaderSize
	w.fragStart = w.wp
	w.posBase = pos - w.wp
}

// write appends packet bytes, crossing chunks as needed.
func (w *TraceWriter) write(b []byte) {
	for {
		n := copy(w.buf[w.wp:], b)
		w.wp += n
		if n == len(b) {
			return
		}
		b = b[n:]
		w.nextBuffer()
	}
}

func (w *TraceWriter) writeString(s string) {
	for {
		n := copy(w.buf[w.wp:], s)
		w.wp += n
		if n == len(s) {
			return
		}
		s = s[n:]
		w.nextBuffer()
	}
}

func (w *TraceWriter) writeVarint(v uint64) {
	if wp := w.wp; len(w.buf)-wp >= 10 {
		w.wp = wp + putVarint10((*[10]byte)(w.buf[wp:]), v)
		return
	}
	var tmp [10]byte
	w.write(tmp[:putVarint10(&tmp, v)])
}

// putTagVarint writes a field tag and a varint value, the commonest
// field shape, with one room check when the chunk has 20 bytes left.
func (w *TraceWriter) putTagVarint(t, v uint64) {
	if wp := w.wp; len(w.buf)-wp >= 20 {
		wp += putVarint10((*[10]byte)(w.buf[wp:]), t)
		w.wp = wp + putVarint10((*[10]byte)(w.buf[wp:]), v)
		return
	}
	w.writeVarint(t)
	w.writeVarint(v)
}

// putVarint10 encodes v at the start of b and returns its length. It
// inlines the one-byte case (most tags, enums and sizes); values below
// 2^14 take an unrolled path.
func putVarint10(b *[10]byte, v uint64) int {
	if v < 1<<7 {
		b[0] = byte(v)
		return 1
	}
	return putVarintLong(b, v)
}

// putVarintLong is putVarint10's out-of-line part. It is kept out of line
// so that putVarint10 itself stays within the inlining budget.
//
//go:noinline
func putVarintLong(b *[10]byte, v uint64) int {
	if v < 1<<14 {
		b[0] = byte(v) | 0x80
		b[1] = byte(v >> 7)
		return 2
	}
	i := 0
	for ; v >= 0x80 && i < 9; i++ {
		b[i] = byte(v) | 0x80
		v >>= 7
	}
	b[i] = byte(v)
	return i + 1
}

// varintWord returns v (2^7 <= v < 2^56) as varint bytes in the low n
// bytes of a little-endian word, and n: the 7-bit groups are spread in
// three steps (28-bit halves, 14-bit quarters, 7-bit eighths) and every
// byte gets its continuation bit; putVarintWord clears the last one as it
// stores it. n is protowire.SizeVarint's. Both inline into AppendVarint,
// which thus writes a 2..8-byte varint with two stores and no load (a
// byte loop cost 9 instructions a byte; merging the word with the bytes
// after it, a load, measured slower), touching no byte after the varint:
// the golden SMB keeps the stale bytes there.
func varintWord(v uint64) (uint64, int) {
	n := int(9*uint32(bits.Len64(v))+64) / 64
	x := v&(1<<28-1) | (v&^(1<<28-1))<<4
	x = x&0x00003fff00003fff | (x&0x0fffc0000fffc000)<<2
	x = x&0x007f007f007f007f | (x&0x3f803f803f803f80)<<1
	return x | 0x8080808080808080, n
}

// putVarintWord stores the low n bytes (2 <= n <= 8) of varintWord's x at
// the start of b, and no other byte: two 4-byte stores (n >= 4) or two
// 2-byte stores, overlapping in the middle; the second ends at the last
// byte and clears its continuation bit (an XOR: an AND-NOT made the
// compiler split the store into three).
func putVarintWord(b *[8]byte, x uint64, n int) {
	if n >= 4 {
		binary.LittleEndian.PutUint32(b[:4], uint32(x))
		binary.LittleEndian.PutUint32(b[n-4:], uint32(x>>(8*(n-4)))^0x80000000)
		return
	}
	binary.LittleEndian.PutUint16(b[:2], uint16(x))
	binary.LittleEndian.PutUint16(b[n-2:], uint16(x>>(8*(n-2)))^0x8000)
}

// putTag14 encodes a field tag below 2^14 (fields below 2048) at the start
// of b and returns its length, one or two bytes.
func putTag14(b *[2]byte, t uint64) int {
	if t < 1<<7 {
		b[0] = byte(t)
		return 1
	}
	b[0] = byte(t) | 0x80
	b[1] = byte(t >> 7)
	return 2
}

// reserveSlot reserves 4 contiguous zeroed bytes for a size written later.
func (w *TraceWriter) reserveSlot() int {
	if len(w.buf)-w.wp < PacketHeaderSize {
		w.nextBuffer()
	}
	s := w.wp
	clear(w.buf[s : s+PacketHeaderSize])
	w.wp += PacketHeaderSize
	return s
}

// endFrame finalizes the innermost open nested message: its size goes into
// its slot (compacted to one byte when it is at most 127 bytes and still
// contiguous in this chunk) or into its patch list entry.
func (w *TraceWriter) endFrame() {
	f := w.frames[len(w.frames)-1]
	w.frames = w.frames[:len(w.frames)-1]
	w.top = msgKey(w.packetGen, len(w.frames)-1)
	size := w.posBase + w.wp - f.start
	if size > MaxMessageLength {
		w.err = fmt.Errorf("smb: nested message of %d bytes exceeds the %d-byte limit", size, MaxMessageLength)
		size = MaxMessageLength
	}
	switch f.kind {
	case slotInChunk:
		if size <= 127 && f.slot+PacketHeaderSize+size == w.wp {
			copy(w.buf[f.slot+1:], w.buf[f.slot+PacketHeaderSize:w.wp])
			w.buf[f.slot] = byte(size)
			w.wp -= 3
		} else {
			PutRedundantVarint(w.buf[f.slot:], uint32(size))
		}
	case slotPatch:
		p := &w.patchStore[f.slot-w.patchBase]
		PutRedundantVarint(p.data[:], uint32(size))
		p.patched = true
	}
}

// beginPacket starts a new packet: a new chunk if the current one is
// missing, too full (< 12 bytes) or at the packet limit; a reserved 4-byte
// size; the packet count; and the producer-set fields.
func (w *TraceWriter) beginPacket() {
	if w.inPacket {
		w.finishPacket()
	}
	w.fragmented = false
	w.err = nil
	if !w.hasChunk || len(w.buf)-w.wp < MinFreeBytesForPacket || w.reachedMax {
		w.startChunk()
	}
	w.packetGen++
	w.top = msgKey(w.packetGen, 0)
	w.inPacket = true
	w.frames = w.frames[:1]
	w.frames[0] = frame{}
	w.fragHdr = w.wp
	clear(w.buf[w.wp : w.wp+PacketHeaderSize])
	w.wp += PacketHeaderSize
	w.fragStart = w.wp
	w.posBase = -w.wp
	if !w.dropping {
		if w.inflated {
			w.inflated = false
		} else {
			w.count++
			w.publish()
		}
		w.reachedMax = w.count >= MaxPacketsPerChunk
		if w.lostPackets {
			w.lostPackets = false
			w.writeVarint(42<<3 | 0) // previous_packet_dropped
			w.writeVarint(257)       // DATA_LOSS_PRESENT | DATA_LOSS_SMB_FULL
		}
	}
	if w.firstPacket {
		w.firstPacket = false
		w.write([]byte{0xb8, 0x05, 0x01}) // first_packet_on_sequence = true
	}
}

// finishPacket closes open nested messages, writes the last fragment's
// size (one byte when the whole packet is at most 127 bytes and in this
// fragment) and inflates the count so scraping sees the packet complete.
func (w *TraceWriter) finishPacket() {
	if w.shift != 0 {
		w.expand() // compact-first's own end is TracePacket.Finish
	}
	if len(w.frames) == 2 && w.compactLastNested() {
		return
	}
	for len(w.frames) > 1 {
		w.endFrame()
	}
	w.inPacket = false
	w.packetGen++ // handles of the finished packet go inert
	w.top = noMessage
	if w.dropping {
		w.lostPackets = true
		w.stats.dropped.Add(1)
		return
	}
	if n := w.wp - w.fragStart; !w.fragmented && n <= 127 {
		copy(w.buf[w.fragHdr+1:], w.buf[w.fragStart:w.wp])
		w.buf[w.fragHdr] = byte(n)
		w.wp -= 3
	} else {
		PutRedundantVarint(w.buf[w.fragHdr:], uint32(w.wp-w.fragStart))
	}
	w.packetDone()
}

// packetDone is the end of every finished packet: the count is inflated so
// scraping sees the packet complete, and completed patches are sent.
// TracePacket.Finish, the hot path, has these lines inline.
func (w *TraceWriter) packetDone() {
	if w.wp < len(w.buf) {
		w.inflateCount()
	}
	if w.patchHead != len(w.patchStore) {
		w.sendReadyPatches()
	}
}

// inflateCount counts the next packet in the chunk header already.
func (w *TraceWriter) inflateCount() {
	w.count++
	w.inflated = true
	w.publish()
}

// sendReadyPatches sends the patches at the front of the patch list once
// the first of them is known.
func (w *TraceWriter) sendReadyPatches() {
	if w.patchHead < len(w.patchStore) && w.patchStore[w.patchHead].patched {
		w.arb.sendPatches(w)
	}
}

// compactLastNested finishes a packet whose one open nested message is
// still in this chunk's only fragment and which, with that message
// compacted, is at most 127 bytes (a TrackEvent packet): both 4-byte sizes
// become 1 byte with one long move (the nested content moves back 6 bytes)
// instead of two. The bytes left behind are those endFrame and
// finishPacket would leave (the golden SMB keeps them): the 6 bytes after
// the packet repeat the nested content's last 3 bytes twice. It reports
// false, changing nothing, when the packet does not qualify.
func (w *TraceWriter) compactLastNested() bool {
	f := w.frames[1]
	wp := w.wp
	c := w.posBase + wp - f.start // nested content size
	n := wp - 6 - w.fragStart + 3 // packet size with the nested size compacted
	if f.kind != slotInChunk || w.fragmented || w.dropping || c < 3 || c > 127 || n > 127 ||
		f.slot+PacketHeaderSize+c != wp || f.slot < w.fragStart {
		return false
	}
	b := w.buf[:wp]
	copy(b[w.fragHdr+1:], b[w.fragStart:f.slot]) // fields before the nested message
	b[f.slot-3] = byte(c)
	copy(b[f.slot-2:], b[f.slot+PacketHeaderSize:]) // nested content, back 6
	copy(b[wp-6:wp-3], b[wp-3:])                    // stale tail, as two moves leave it
	b[w.fragHdr] = byte(n)
	w.wp = wp - 6
	w.frames = w.frames[:1]
	w.inPacket = false
	w.packetGen++
	w.top = noMessage
	w.packetDone()
	return true
}

// WritePacket writes one complete proto-encoded TracePacket. Packets of up
// to 127 bytes that fit the current chunk take a copy-only fast path. An
// empty packet becomes a zero-length fragment, which readers skip as
// padding (as in Perfetto). Under the Drop policy a lost packet is not an
// error (it is counted in Stats and flagged on the next packet); under
// Stall the error says how long the writer waited.
func (w *TraceWriter) WritePacket(p []byte) error {
	if w.closed {
		return ErrWriterClosed
	}
	if len(p) > MaxMessageLength {
		return fmt.Errorf("smb: packet of %d bytes exceeds the %d-byte limit", len(p), MaxMessageLength)
	}
	n := len(p)
	if n <= 127 && w.hasChunk && !w.inPacket && !w.reachedMax && !w.lostPackets && !w.firstPacket {
		wp := w.wp
		buf := w.buf
		if len(buf)-wp >= MinFreeBytesForPacket && wp+PacketHeaderSize+n <= len(buf) {
			buf[wp] = byte(n)
			copy(buf[wp+1:], p)
			w.wp = wp + 1 + n
			c := w.count
			if !w.inflated {
				c++
			}
			w.reachedMax = c >= MaxPacketsPerChunk
			w.count = c + 1
			w.inflated = true
			w.packetGen++
			atomic.StoreUint32(w.word, uint32(w.id)|uint32(w.count&0x3FF|uint16(w.flags)<<10)<<16)
			yieldAt(sitePublished)
			return nil
		}
	}
	w.beginPacket()
	w.write(p)
	w.finishPacket()
	return w.takeErr()
}

func (w *TraceWriter) takeErr() error {
	err := w.err
	w.err = nil
	return err
}

// takeErrIfAny is takeErr without the store (a write-barrier check) when
// there is no error.
func (w *TraceWriter) takeErrIfAny() error {
	if w.err == nil {
		return nil
	}
	return w.takeErr()
}

// NewTracePacket starts a packet written field by field into the SMB. A
// packet still open is finished first. The packet ends with Finish (or
// with the next NewTracePacket, WritePacket or Flush).
func (w *TraceWriter) NewTracePacket() TracePacket {
	if w.closed {
		return TracePacket{}
	}
	if h := w.wp; !w.inPacket && w.inflated && !w.reachedMax && !w.lostPackets &&
		!w.normalLayoutOnly && len(w.buf)-h >= MinFreeBytesForPacket {
		// The steady state (a chunk with room whose count already
		// includes this packet, nothing to write before the caller's
		// fields): beginPacket's work, compact-first (compact.go). The
		// size bytes it would zero are all written when the packet ends.
		w.fragmented = false
		if w.err != nil { // a packet ended by End keeps its error until now
			w.err = nil
		}
		w.packetGen++
		w.top = msgKey(w.packetGen, 0)
		w.inPacket = true
		// len(w.frames) is 1 between packets, and frames[0], the root's,
		// is never written. fragStart and posBase are set by expand.
		w.fragHdr = h
		w.buf[h] = 0
		w.inflated = false
		w.reachedMax = w.count >= MaxPacketsPerChunk
		w.wp = h + 1
		w.shift = compactRoot
		return TracePacket{Message{w: w, key: w.top}}
	}
	w.beginPacket()
	if w.wp == w.fragStart && !w.dropping && !w.normalLayoutOnly {
		// Nothing written yet: write compact-first (compact.go).
		w.wp -= compactRoot
		w.shift = compactRoot
	}
	return TracePacket{Message{w: w, key: w.top}}
}

// Flush finishes an open packet, returns the partly written chunk to the
// arbiter and delivers all pending commits.
func (w *TraceWriter) Flush() error {
	if w.closed {
		return ErrWriterClosed
	}
	if w.inPacket {
		w.finishPacket()
	}
	if w.hasChunk {
		w.returnChunk()
	}
	w.arb.FlushPendingCommits()
	return w.takeErr()
}

// Close flushes the writer and releases its writer id. Further calls
// return ErrWriterClosed.
func (w *TraceWriter) Close() error {
	if w.closed {
		return ErrWriterClosed
	}
	err := w.Flush()
	w.closed = true
	w.arb.releaseWriterID(w.id)
	return err
}
