package buffer

import "encoding/binary"

// Every byte range of the buffer is covered by records: a 16-byte header
// followed by the copied fragment bytes, padded so the next record starts at
// a multiple of 16. The header is an implementation detail, not an ABI:
//
//	off  size  field
//	0    4     chunk id
//	4    4     (producer << 16) | writer; 0 marks a padding record
//	8    2     payload capacity (never changes once written)
//	10   2     payload size: bytes of valid fragments
//	12   2     payload avail: bytes not yet consumed; the next unread
//	           fragment starts at payload size - payload avail
//	14   1     flags: SMB chunk flags plus flagIncomplete
//	15   1     aux bits (Perfetto keeps a debug checksum here instead):
//	           auxHasPacket: some stored fragment is non-empty;
//	           auxPatched: a patch changed the payload since it was
//	           copied, so its fragments may no longer tokenize cleanly
//
// A zero-filled area therefore reads as a chain of 16-byte padding records.
const (
	hdrSize = 16

	hdrChunkID   = 0
	hdrPriWriID  = 4
	hdrCapacity  = 8
	hdrPayload   = 10
	hdrAvail     = 12
	hdrFlags     = 14
	hdrAux       = 15
	maxRecordCap = 0xFFFF
)

// SMB chunk flags (shared-memory ABI) and the buffer-local incomplete flag.
const (
	flagFirstContinues = 0x01 // first fragment continues a packet from chunk id-1
	flagLastContinues  = 0x02 // last fragment continues in chunk id+1
	flagNeedsPatching  = 0x04 // chunk waits for out-of-band patches
	flagABIMask        = flagFirstContinues | flagLastContinues | flagNeedsPatching
	flagIncomplete     = 0x80 // copied by SMB scraping: may still grow
)

// Aux bits (header byte 15). They let an overwrite skip re-tokenizing a
// record whose outcome is known from its copy.
const (
	auxHasPacket = 0x01
	auxPatched   = 0x02
)

// outerSize is the bytes a record with the given payload capacity occupies.
func outerSize(capacity int) int { return (hdrSize + capacity + 15) &^ 15 }

func le32(m []byte, off int) uint32 { return binary.LittleEndian.Uint32(m[off : off+4]) }
func le16(m []byte, off int) uint16 { return binary.LittleEndian.Uint16(m[off : off+2]) }
func put32(m []byte, off int, v uint32) {
	binary.LittleEndian.PutUint32(m[off:off+4], v)
}
func put16(m []byte, off int, v uint16) {
	binary.LittleEndian.PutUint16(m[off:off+2], v)
}

func (b *TraceBuffer) recPriWri(off int) uint32 { return le32(b.mem, off+hdrPriWriID) }
func (b *TraceBuffer) recCap(off int) int       { return int(le16(b.mem, off+hdrCapacity)) }
func (b *TraceBuffer) recOuter(off int) int     { return outerSize(b.recCap(off)) }
func (b *TraceBuffer) recPayload(off int) int   { return int(le16(b.mem, off+hdrPayload)) }
func (b *TraceBuffer) recAvail(off int) int     { return int(le16(b.mem, off+hdrAvail)) }
func (b *TraceBuffer) recFlags(off int) uint8   { return b.mem[off+hdrFlags] }

// writeHeader writes a complete record header at off.
func (b *TraceBuffer) writeHeader(off int, chunkID, priWri uint32, capacity, payload, avail int, flags, aux uint8) {
	h := b.mem[off : off+hdrSize]
	binary.LittleEndian.PutUint32(h[0:4], chunkID)
	binary.LittleEndian.PutUint32(h[4:8], priWri)
	binary.LittleEndian.PutUint16(h[8:10], uint16(capacity))
	binary.LittleEndian.PutUint16(h[10:12], uint16(payload))
	binary.LittleEndian.PutUint16(h[12:14], uint16(avail))
	h[14] = flags
	h[15] = aux
}

// writePadding turns [off, off+outer) into one padding record.
func (b *TraceBuffer) writePadding(off, outer int) {
	b.writeHeader(off, 0, 0, outer-hdrSize, 0, 0, 0, 0)
}
