package buffer

import "fmt"

// Policy says what a full buffer does with new chunks.
type Policy int

const (
	// RingBuffer overwrites the oldest chunks (Perfetto's kOverwrite).
	RingBuffer Policy = iota
	// Discard stops accepting chunks, forever, once one does not fit
	// between the write cursor and the end of the buffer (kDiscard).
	Discard
)

// String returns the config spelling of the policy.
func (p Policy) String() string {
	switch p {
	case RingBuffer:
		return "ring_buffer"
	case Discard:
		return "discard"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ClientIdentity is the trusted identity of the process owning a producer.
type ClientIdentity struct {
	UID int32
	PID int32
}

// SequenceProperties identifies the sequence a packet belongs to.
type SequenceProperties struct {
	ProducerID uint16
	WriterID   uint16
	Client     ClientIdentity
}

// pageSize is the granularity buffer sizes are rounded up to.
const pageSize = 4096

// maxSize is the largest buffer: offsets are 32-bit.
const maxSize = 1 << 32

// OverwriteObserver receives each complete packet that a ring-buffer
// overwrite deletes, in sequence order. The slices point into buffer memory
// and are valid only during the call; the observer must not call back into
// the buffer.
type OverwriteObserver func(seq SequenceProperties, packet [][]byte)

// TraceBuffer is Perfetto's TraceBufferV2: a ring (or discard) buffer of
// chunk records with per-sequence ordering. It is not safe for concurrent
// use.
type TraceBuffer struct {
	mem      []byte
	size     int       // len(mem) until Close
	own      *ownedMem // nil when mem is the caller's (BeginClone)
	policy   Policy
	readOnly bool

	wr       int // write cursor, 16-aligned
	usedSize int // high-water mark of record ends
	rd       int // read cursor
	gen      uint64
	discard  bool // DISCARD policy: permanently refusing writes

	seqs      map[uint32]*seqState
	emptySeqs int
	ageClock  uint64
	cacheKey  uint32
	cacheSeq  *seqState

	// The read pass's current sequence reader.
	rdr       seqReader
	rdrActive bool
	// passStale is set by writes: the next read re-anchors the read
	// cursor instead of continuing from a position a write may have
	// overwritten.
	passStale bool

	writerHist map[uint32]*histogram
	observer   OverwriteObserver
	// generalWalkOnly turns the overwrite fast paths off, so tests can hold
	// them against the general erase-mode walk.
	generalWalkOnly bool

	stats Stats

	// Scratch space reused to keep reads and overwrites allocation-free.
	raFrags   []fragRef
	erasePkt  [][]byte
	pktSlices [][]byte // Packet.Slices of zero Packets (see Packet)
	warmSink  byte     // see warm
	pfFrom    int      // b.mem[pfFrom:pfTo] was prefetched last
	pfTo      int

	cow *PendingClone // an incremental clone copying b.mem (clone_incremental.go)
}

// New creates a buffer of size bytes, rounded up to a multiple of 4096.
// Its memory is mapped outside the Go heap (mem.go): the owner must Close
// it.
func New(size int, policy Policy) (*TraceBuffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("buffer: size %d must be positive", size)
	}
	if policy != RingBuffer && policy != Discard {
		return nil, fmt.Errorf("buffer: unknown policy %d", int(policy))
	}
	rounded := (uint64(size) + pageSize - 1) &^ (pageSize - 1)
	if rounded > maxSize {
		return nil, fmt.Errorf("buffer: size %d exceeds the 4 GiB limit", size)
	}
	b := &TraceBuffer{
		size:       int(rounded),
		policy:     policy,
		seqs:       make(map[uint32]*seqState),
		writerHist: make(map[uint32]*histogram),
		pktSlices:  make([][]byte, 0, 4),
	}
	b.stats.BufferSize = rounded
	if err := b.allocMem(int(rounded)); err != nil {
		return nil, err
	}
	return b, nil
}

// Size returns the buffer size in bytes.
func (b *TraceBuffer) Size() int { return b.size }

// UsedSize returns the high-water mark: bytes up to the end of the furthest
// record ever written.
func (b *TraceBuffer) UsedSize() int { return b.usedSize }

// HasData reports whether anything was ever written.
func (b *TraceBuffer) HasData() bool { return b.usedSize > 0 }

// Policy returns the buffer's full-buffer policy.
func (b *TraceBuffer) Policy() Policy { return b.policy }

// IsReadOnly reports whether the buffer is a clone refusing writes.
func (b *TraceBuffer) IsReadOnly() bool { return b.readOnly }

// SetOverwriteObserver installs fn (nil removes it). It is called with each
// packet deleted by a ring-buffer overwrite.
func (b *TraceBuffer) SetOverwriteObserver(fn OverwriteObserver) { b.observer = fn }

// seqKey is Perfetto's pri_wri_id.
func seqKey(producer, writer uint16) uint32 { return uint32(producer)<<16 | uint32(writer) }

// lookupSeq returns the sequence for key or nil.
func (b *TraceBuffer) lookupSeq(key uint32) *seqState {
	if b.cacheSeq != nil && b.cacheKey == key {
		return b.cacheSeq
	}
	s := b.seqs[key]
	if s != nil {
		b.cacheKey, b.cacheSeq = key, s
	}
	return s
}

// props returns the sequence properties of s.
func (s *seqState) props() SequenceProperties {
	return SequenceProperties{ProducerID: s.producer, WriterID: s.writer, Client: s.client}
}
