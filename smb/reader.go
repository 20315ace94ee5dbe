package smb

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ChunkView is one chunk the service took from the SMB (or from a commit's
// emulation-mode data). Payload aliases SMB memory and is valid only during
// the callback that received it; the producer can write to shared memory
// at any time, so whoever keeps the bytes must copy them and still treat
// the copy as untrusted.
type ChunkView struct {
	// Page and Index locate the chunk in the SMB (informational for
	// emulation-mode chunks).
	Page, Index uint32
	// TargetBuffer is the buffer the commit named (0 for scraped chunks:
	// the service looks up the writer's registered buffer).
	TargetBuffer uint32
	// WriterID and ChunkID come from the chunk header.
	WriterID uint16
	ChunkID  uint32
	// Fragments is the number of fragments in Payload.
	Fragments uint16
	// Flags are the chunk's Flag* bits (undefined bits cleared).
	Flags uint8
	// Complete is false for a chunk scraped while still being written; its
	// last counted fragment (possibly unfinished) is then left out of
	// Payload and Fragments, and FlagLastPacketContinuesOnNextChunk is
	// cleared.
	Complete bool
	// Aborted says a fragment with the drop sentinel size ended the chunk:
	// the writer abandoned that packet. Payload stops before it.
	Aborted bool
	// WithSentinel is, for an Aborted chunk, Payload followed by the
	// sentinel's size varint: Fragments+1 fragments, the last one the
	// writer's drop marker. A trace buffer given this form accounts the
	// writer's loss itself (trace_writer_packet_loss). Nil otherwise.
	WithSentinel []byte
	// Payload holds exactly Fragments fragments (each a varint size and
	// that many bytes), starting at payload offset 0, so patch offsets
	// apply to it directly.
	Payload []byte
	// PayloadCapacity is the size of the chunk's payload area (chunk size
	// minus header). A chunk scraped incomplete can grow up to it when
	// its real commit arrives, so a trace buffer should reserve that much
	// for it (Perfetto copies the whole chunk); the bytes past Payload are
	// not handed out because the writer may be changing them.
	PayloadCapacity int
}

// RejectReason says why the reader refused a chunk or patch.
type RejectReason int

// Reject reasons.
const (
	// RejectPageOutOfRange: chunks_to_move.page ≥ number of pages.
	RejectPageOutOfRange RejectReason = iota
	// RejectBadLayout: the page is not partitioned or has a reserved layout.
	RejectBadLayout
	// RejectChunkIndex: chunks_to_move.chunk is not a chunk of the layout.
	RejectChunkIndex
	// RejectNotComplete: the chunk was not in state Complete.
	RejectNotComplete
	// RejectBadWriterID: the header's writer id is 0 or > 32767.
	RejectBadWriterID
	// RejectBadVarint: a fragment size varint runs past the chunk or
	// exceeds 10 bytes.
	RejectBadVarint
	// RejectFragmentOverrun: a fragment is longer than the rest of the
	// chunk (the count promises more fragments than the chunk holds).
	RejectFragmentOverrun
	// RejectEmulatedSize: emulation-mode data shorter than a chunk header
	// or longer than 65536 bytes.
	RejectEmulatedSize
	// RejectReleaseFailed: the chunk was read but could not be moved back to
	// Free because the producer changed its state meanwhile.
	RejectReleaseFailed
	// NumRejectReasons is the number of reasons.
	NumRejectReasons
)

var rejectNames = [NumRejectReasons]string{
	"page_out_of_range", "bad_layout", "chunk_index_out_of_range", "not_complete",
	"bad_writer_id", "bad_varint", "fragment_overrun", "emulated_size", "release_failed",
}

// String is the reason's counter name.
func (r RejectReason) String() string {
	if r >= 0 && r < NumRejectReasons {
		return rejectNames[r]
	}
	return fmt.Sprintf("RejectReason(%d)", int(r))
}

// ReaderStats are a Reader's counters.
type ReaderStats struct {
	// ChunksRead counts chunks handed out from commits.
	ChunksRead uint64
	// ChunksScraped counts chunks handed out by Scrape.
	ChunksScraped uint64
	// ScrapeSkipped counts BeingWritten chunks Scrape left alone because
	// they held no finished fragment (count < 2).
	ScrapeSkipped uint64
	// CommitsAlreadyScraped counts committed chunks not handed out
	// again because a scrape had already handed them out Complete (their
	// bytes cannot have changed since).
	CommitsAlreadyScraped uint64
	// ScrapeHolesFilled counts chunks a scrape's second walk handed out:
	// chunks a writer finished behind the first walk (see Scrape).
	ScrapeHolesFilled uint64
	// PayloadBytes counts payload bytes handed out.
	PayloadBytes uint64
	// WriterAborts counts chunks ended by the drop sentinel.
	WriterAborts uint64
	// PatchGroups counts ChunkToPatch entries handed out.
	PatchGroups uint64
	// PatchesDiscarded counts patches refused (bad writer id, more than
	// 1024 in one entry, data not 4 bytes).
	PatchesDiscarded uint64
	// Rejected counts refused chunks by reason.
	Rejected [NumRejectReasons]uint64
}

// Each calls fn with every counter's name and value.
func (s *ReaderStats) Each(fn func(name string, v uint64)) {
	fn("chunks_read", s.ChunksRead)
	fn("chunks_scraped", s.ChunksScraped)
	fn("scrape_skipped", s.ScrapeSkipped)
	fn("commits_already_scraped", s.CommitsAlreadyScraped)
	fn("scrape_holes_filled", s.ScrapeHolesFilled)
	fn("payload_bytes", s.PayloadBytes)
	fn("writer_aborts", s.WriterAborts)
	fn("patch_groups", s.PatchGroups)
	fn("patches_discarded", s.PatchesDiscarded)
	for i, v := range s.Rejected {
		fn("rejected_"+rejectNames[i], v)
	}
}

// TotalRejected sums Rejected.
func (s *ReaderStats) TotalRejected() uint64 {
	var t uint64
	for _, v := range s.Rejected {
		t += v
	}
	return t
}

// MaxPatchesPerChunk is the most patches the service accepts in one
// ChunkToPatch; an entry with more is discarded whole.
const MaxPatchesPerChunk = 1024

// Reader is the service side of one producer's SMB: it takes the chunks a
// CommitData names, validates them, hands them out and frees them, and
// scrapes uncommitted chunks on flush. A Reader is not safe for concurrent
// use; ReadCommit and Scrape must run on one goroutine (the producer may
// write concurrently).
type Reader struct {
	smb   *SMB
	stats ReaderStats
	view  ChunkView
	// scraped holds, per SMB chunk slot (see slotKey), the writer and
	// chunk id of a Complete chunk that Scrape handed out and whose
	// commit has not been read yet. Its commit is then released without
	// being handed out a second time: a copy the trace buffer had already
	// read would otherwise come back as a stale recommit and be counted
	// as chunks_discarded (data loss) although nothing was lost.
	scraped map[uint32]uint64
	// newest is Scrape's per-writer newest chunk id of its first walk.
	newest []newestScraped
}

// NewReader returns a reader of s.
func NewReader(s *SMB) *Reader { return &Reader{smb: s} }

// Stats returns the reader's counters.
func (r *Reader) Stats() *ReaderStats { return &r.stats }

// ReadCommit processes cd: every chunks_to_move entry is validated and,
// if sound, handed to onChunk and then freed (BeingRead → Free); then
// every valid chunks_to_patch entry is handed to onPatch for the caller to
// apply to its copy. Either callback may be nil. Malformed entries are
// counted in Stats, never fatal.
func (r *Reader) ReadCommit(cd *CommitData, onChunk func(*ChunkView), onPatch func(*ChunkToPatch)) {
	for i := range cd.ChunksToMove {
		m := &cd.ChunksToMove[i]
		if m.Data != nil {
			r.readEmulated(m, onChunk)
		} else {
			r.readMove(m, onChunk)
		}
	}
	for i := range cd.ChunksToPatch {
		p := &cd.ChunksToPatch[i]
		r.stats.PatchesDiscarded += uint64(p.DiscardedPatches)
		if p.WriterID == 0 || p.WriterID > MaxWriterID || len(p.Patches) > MaxPatchesPerChunk {
			r.stats.PatchesDiscarded += uint64(len(p.Patches))
			continue
		}
		r.stats.PatchGroups++
		if onPatch != nil {
			onPatch(p)
		}
	}
}

func (r *Reader) reject(why RejectReason) { r.stats.Rejected[why]++ }

func (r *Reader) readMove(m *ChunkToMove, onChunk func(*ChunkView)) {
	s := r.smb
	if uint64(m.Page) >= uint64(s.NumPages()) {
		r.reject(RejectPageOutOfRange)
		return
	}
	p := int(m.Page)
	l := LayoutOf(s.PageBitmap(p))
	if l.NumChunks() == 0 {
		r.reject(RejectBadLayout)
		return
	}
	if m.Chunk >= l.NumChunks() {
		r.reject(RejectChunkIndex)
		return
	}
	l, ok := s.transition(p, m.Chunk, ChunkComplete, ChunkBeingRead)
	if !ok {
		r.reject(RejectNotComplete)
		return
	}
	chunk := s.chunkBytes(p, l, m.Chunk)
	h := DecodeHeaderWords(load32(chunk, 0), load32(chunk, 4))
	if r.takeScraped(m.Page, m.Chunk, h) {
		r.stats.CommitsAlreadyScraped++
	} else if r.fill(h, chunk[ChunkHeaderSize:], int(h.Count), true) {
		v := &r.view
		v.Page, v.Index, v.TargetBuffer = m.Page, m.Chunk, m.TargetBuffer
		r.stats.ChunksRead++
		r.stats.PayloadBytes += uint64(len(v.Payload))
		if onChunk != nil {
			onChunk(v)
		}
		v.Payload = nil
	}
	if !s.release(p, l, m.Chunk) {
		r.reject(RejectReleaseFailed)
	}
}

// slotKey names chunk index i of page p (a page holds at most 14 chunks).
func slotKey(p, i uint32) uint32 { return p<<4 | i }

// scrapedID packs the identity of a chunk's content: its writer and chunk
// id. A slot reused for another chunk has another identity.
func scrapedID(h ChunkHeader) uint64 { return uint64(h.WriterID)<<32 | uint64(h.ChunkID) }

// markScraped records that the Complete chunk with header h at slot
// (p, i) was handed out by Scrape.
func (r *Reader) markScraped(p, i uint32, h ChunkHeader) {
	if r.scraped == nil {
		r.scraped = make(map[uint32]uint64)
	}
	r.scraped[slotKey(p, i)] = scrapedID(h)
}

// wasScraped reports whether Scrape already handed out the Complete chunk
// with header h at slot (p, i).
func (r *Reader) wasScraped(p, i uint32, h ChunkHeader) bool {
	id, ok := r.scraped[slotKey(p, i)]
	return ok && id == scrapedID(h)
}

// takeScraped reports whether the chunk with header h being committed at
// slot (p, i) was already handed out Complete by a scrape, and forgets the
// slot either way: it is freed after this commit.
func (r *Reader) takeScraped(p, i uint32, h ChunkHeader) bool {
	if len(r.scraped) == 0 {
		return false
	}
	k := slotKey(p, i)
	id, ok := r.scraped[k]
	if ok {
		delete(r.scraped, k)
	}
	return ok && id == scrapedID(h)
}

func (r *Reader) readEmulated(m *ChunkToMove, onChunk func(*ChunkView)) {
	if len(m.Data) < ChunkHeaderSize || len(m.Data) > MaxPageSize {
		r.reject(RejectEmulatedSize)
		return
	}
	h := DecodeChunkHeader(m.Data)
	count, complete := int(h.Count), !m.ChunkIncomplete
	if !complete {
		count--
	}
	if !r.fill(h, m.Data[ChunkHeaderSize:], count, complete) {
		return
	}
	v := &r.view
	v.Page, v.Index, v.TargetBuffer = m.Page, m.Chunk, m.TargetBuffer
	r.stats.ChunksRead++
	r.stats.PayloadBytes += uint64(len(v.Payload))
	if onChunk != nil {
		onChunk(v)
	}
	v.Payload = nil
}

// fill validates header h and count fragments of payload into r.view.
func (r *Reader) fill(h ChunkHeader, payload []byte, count int, complete bool) bool {
	if h.WriterID == 0 || h.WriterID > MaxWriterID {
		r.reject(RejectBadWriterID)
		return false
	}
	end, n, aborted, why := ParseFragments(payload, max(count, 0))
	if why >= 0 {
		r.reject(why)
		return false
	}
	flags := h.Flags & FlagsMask
	if !complete {
		flags &^= FlagLastPacketContinuesOnNextChunk
	}
	var withSentinel []byte
	if aborted {
		r.stats.WriterAborts++
		_, vl := protowire.ConsumeVarint(payload[end:]) // ParseFragments decoded it
		withSentinel = payload[: end+vl : end+vl]
	}
	r.view = ChunkView{WriterID: h.WriterID, ChunkID: h.ChunkID, Fragments: uint16(n), Flags: flags,
		Complete: complete, Aborted: aborted, Payload: payload[:end:end], WithSentinel: withSentinel,
		PayloadCapacity: len(payload)}
	return true
}

// ParseFragments walks count fragments at the start of payload. It
// returns the offset just past the last whole fragment, the number of
// fragments walked, whether a drop-sentinel size stopped the walk early
// (aborted), and a reject reason, or -1 if the fragments are sound. It
// never reads outside payload.
func ParseFragments(payload []byte, count int) (end, n int, aborted bool, why RejectReason) {
	off := 0
	for n < count {
		if off == len(payload) {
			return off, n, false, RejectFragmentOverrun
		}
		if c := int(payload[off]); c < 0x80 {
			// Most fragments: packets under 128 bytes.
			if c >= len(payload)-off {
				return off, n, false, RejectFragmentOverrun
			}
			off += 1 + c
			n++
			continue
		}
		size, vl := protowire.ConsumeVarint(payload[off:])
		if vl < 0 {
			return off, n, false, RejectBadVarint
		}
		if size == DropPacketSize {
			return off, n, true, -1
		}
		if size > uint64(len(payload)-off-vl) {
			return off, n, false, RejectFragmentOverrun
		}
		off += vl + int(size)
		n++
	}
	return off, n, false, -1
}
