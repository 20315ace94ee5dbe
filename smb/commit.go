package smb

import (
	"errors"
	"fmt"
	"math"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// ChunkToMove is CommitDataRequest.ChunksToMove: a chunk the service should
// copy into a trace buffer.
type ChunkToMove struct {
	// Page is the 0-based page index in the SMB (field 1).
	Page uint32
	// Chunk is the chunk index in the page, 0..13 (field 2).
	Chunk uint32
	// TargetBuffer is the global id of the destination trace buffer (field 3).
	TargetBuffer uint32
	// Data is, in emulation mode only, the whole chunk (header + payload)
	// (field 4). After Unmarshal it aliases the input buffer; nil if absent.
	Data []byte
	// ChunkIncomplete says, in emulation mode only, that Data was scraped
	// while still being written (field 5).
	ChunkIncomplete bool
}

// Patch is CommitDataRequest.ChunkToPatch.Patch: 4 bytes to write at Offset
// of a chunk's payload (offset 0 = first byte after the chunk header).
type Patch struct {
	// Offset is payload-relative (field 1).
	Offset uint32
	// Data is the redundant varint to write (field 2, exactly 4 bytes).
	Data [4]byte
}

// ChunkToPatch is CommitDataRequest.ChunkToPatch: patches for one chunk of
// one writer, identified by ids rather than by SMB position because the
// chunk has usually left the SMB already.
type ChunkToPatch struct {
	// TargetBuffer is the buffer holding the chunk (field 1).
	TargetBuffer uint32
	// WriterID is the writer that wrote the chunk (field 2).
	WriterID uint16
	// ChunkID is the chunk's id (field 3).
	ChunkID uint32
	// Patches are the patches (field 4).
	Patches []Patch
	// HasMorePatches says further patches for this chunk will follow (field 5).
	HasMorePatches bool
	// DiscardedPatches counts patches Unmarshal dropped because their data
	// was not exactly 4 bytes (the service counts them as discarded and
	// applies the rest). Not encoded.
	DiscardedPatches uint32
}

// CommitData is Perfetto's CommitDataRequest.
type CommitData struct {
	// ChunksToMove lists chunks to copy, in order (field 1).
	ChunksToMove []ChunkToMove
	// ChunksToPatch lists patches, applied after all moves (field 2).
	ChunksToPatch []ChunkToPatch
	// FlushRequestID, when non-zero, acknowledges that flush and all lower
	// ids (field 3).
	FlushRequestID uint64
}

// Reset empties c, keeping its slices' capacity.
func (c *CommitData) Reset() {
	for i := range c.ChunksToPatch {
		c.ChunksToPatch[i].Patches = c.ChunksToPatch[i].Patches[:0]
	}
	c.ChunksToMove = c.ChunksToMove[:0]
	c.ChunksToPatch = c.ChunksToPatch[:0]
	c.FlushRequestID = 0
}

// Empty reports whether c carries nothing.
func (c *CommitData) Empty() bool {
	return len(c.ChunksToMove) == 0 && len(c.ChunksToPatch) == 0 && c.FlushRequestID == 0
}

// Field numbers of commit_data_request.proto.
const (
	fieldChunksToMove   = 1
	fieldChunksToPatch  = 2
	fieldFlushRequestID = 3

	fieldMovePage       = 1
	fieldMoveChunk      = 2
	fieldMoveTarget     = 3
	fieldMoveData       = 4
	fieldMoveIncomplete = 5

	fieldPatchTarget  = 1
	fieldPatchWriter  = 2
	fieldPatchChunkID = 3
	fieldPatchPatches = 4
	fieldPatchHasMore = 5
	fieldPatchOffset  = 1
	fieldPatchData    = 2
)

func (m *ChunkToMove) size() int {
	n := 3 + protowire.SizeVarint(uint64(m.Page)) + protowire.SizeVarint(uint64(m.Chunk)) +
		protowire.SizeVarint(uint64(m.TargetBuffer))
	if m.Data != nil {
		n += 1 + protowire.SizeBytes(len(m.Data))
	}
	if m.ChunkIncomplete {
		n += 2
	}
	return n
}

func patchSize(p *Patch) int { return 1 + protowire.SizeVarint(uint64(p.Offset)) + 2 + 4 }

func (c *ChunkToPatch) size() int {
	n := 3 + protowire.SizeVarint(uint64(c.TargetBuffer)) + protowire.SizeVarint(uint64(c.WriterID)) +
		protowire.SizeVarint(uint64(c.ChunkID))
	for i := range c.Patches {
		n += 1 + protowire.SizeBytes(patchSize(&c.Patches[i]))
	}
	if c.HasMorePatches {
		n += 2
	}
	return n
}

// AppendMarshal appends the protobuf encoding of c to dst. Ids, page and
// chunk indices are always emitted (even when zero), as Perfetto does;
// HasMorePatches, ChunkIncomplete and FlushRequestID only when set.
func (c *CommitData) AppendMarshal(dst []byte) []byte {
	for i := range c.ChunksToMove {
		m := &c.ChunksToMove[i]
		dst = wire.AppendLen(dst, fieldChunksToMove, m.size())
		dst = wire.AppendVarint(dst, fieldMovePage, uint64(m.Page))
		dst = wire.AppendVarint(dst, fieldMoveChunk, uint64(m.Chunk))
		dst = wire.AppendVarint(dst, fieldMoveTarget, uint64(m.TargetBuffer))
		if m.Data != nil {
			dst = wire.AppendBytes(dst, fieldMoveData, m.Data)
		}
		if m.ChunkIncomplete {
			dst = wire.AppendVarint(dst, fieldMoveIncomplete, 1)
		}
	}
	for i := range c.ChunksToPatch {
		p := &c.ChunksToPatch[i]
		dst = wire.AppendLen(dst, fieldChunksToPatch, p.size())
		dst = wire.AppendVarint(dst, fieldPatchTarget, uint64(p.TargetBuffer))
		dst = wire.AppendVarint(dst, fieldPatchWriter, uint64(p.WriterID))
		dst = wire.AppendVarint(dst, fieldPatchChunkID, uint64(p.ChunkID))
		for j := range p.Patches {
			pp := &p.Patches[j]
			dst = wire.AppendLen(dst, fieldPatchPatches, patchSize(pp))
			dst = wire.AppendVarint(dst, fieldPatchOffset, uint64(pp.Offset))
			dst = wire.AppendBytes(dst, fieldPatchData, pp.Data[:])
		}
		if p.HasMorePatches {
			dst = wire.AppendVarint(dst, fieldPatchHasMore, 1)
		}
	}
	if c.FlushRequestID != 0 {
		dst = wire.AppendVarint(dst, fieldFlushRequestID, c.FlushRequestID)
	}
	return dst
}

// ErrMalformedCommit is matched (errors.Is) by every CommitData.Unmarshal
// error.
var ErrMalformedCommit = errors.New("smb: malformed CommitDataRequest")

type decodeError struct {
	off int
	msg string
}

func (e *decodeError) Error() string {
	return fmt.Sprintf("smb: malformed CommitDataRequest at byte %d: %s", e.off, e.msg)
}
func (e *decodeError) Is(target error) bool { return target == ErrMalformedCommit }

func errAt(off int, format string, args ...any) error {
	return &decodeError{off: off, msg: fmt.Sprintf(format, args...)}
}

// fieldSpec names a known field of a CommitDataRequest message and the
// wire type it must have.
type fieldSpec struct {
	name string
	typ  protowire.Type
}

// The known fields of each message, indexed by field number.
var (
	commitSpec = []fieldSpec{
		fieldChunksToMove:   {"chunks_to_move", protowire.BytesType},
		fieldChunksToPatch:  {"chunks_to_patch", protowire.BytesType},
		fieldFlushRequestID: {"flush_request_id", protowire.VarintType},
	}
	moveSpec = []fieldSpec{
		fieldMovePage:       {"page", protowire.VarintType},
		fieldMoveChunk:      {"chunk", protowire.VarintType},
		fieldMoveTarget:     {"target_buffer", protowire.VarintType},
		fieldMoveData:       {"data", protowire.BytesType},
		fieldMoveIncomplete: {"chunk_incomplete", protowire.VarintType},
	}
	patchChunkSpec = []fieldSpec{
		fieldPatchTarget:  {"target_buffer", protowire.VarintType},
		fieldPatchWriter:  {"writer_id", protowire.VarintType},
		fieldPatchChunkID: {"chunk_id", protowire.VarintType},
		fieldPatchPatches: {"patches", protowire.BytesType},
		fieldPatchHasMore: {"has_more_patches", protowire.VarintType},
	}
	patchSpec = []fieldSpec{
		fieldPatchOffset: {"offset", protowire.VarintType},
		fieldPatchData:   {"data", protowire.BytesType},
	}
)

// msgFields walks one message with internal/wire's iterator and yields
// its known fields of the right wire type; unknown fields are skipped. A
// known field of another wire type, and every malformed field, ends the
// walk with an error that names the message, the field and the byte
// offset in the whole request.
type msgFields struct {
	it   wire.Iter
	pos  int // offset of the message in the whole request
	name string
	spec []fieldSpec
	err  error
}

func fieldsOf(b []byte, pos int, name string, spec []fieldSpec) msgFields {
	return msgFields{it: wire.Fields(b), pos: pos, name: name, spec: spec}
}

func (m *msgFields) known(num protowire.Number) (fieldSpec, bool) {
	if num <= 0 || int(num) >= len(m.spec) || m.spec[num].name == "" {
		return fieldSpec{}, false
	}
	return m.spec[num], true
}

// next returns the next known field, or nil at the end of the message or
// at an error (m.err).
func (m *msgFields) next() *wire.Field {
	for m.it.Next() {
		f := m.it.Field()
		s, ok := m.known(f.Num)
		if !ok {
			continue
		}
		if f.Type != s.typ {
			m.err = m.wrongType(f.Off, s, f.Type)
			return nil
		}
		return f
	}
	e := m.it.Malformed()
	if e == nil {
		return nil
	}
	s, ok := m.known(e.Num)
	switch {
	case e.Num == 0:
		m.err = errAt(m.pos+e.Off, "%s: bad field tag: %v", m.name, e.Err)
	case !ok:
		m.err = errAt(m.pos+e.Off, "%s: unknown field %d: %v", m.name, e.Num, e.Err)
	case e.Type != s.typ:
		m.err = m.wrongType(e.Off, s, e.Type)
	default:
		m.err = errAt(m.pos+e.ValOff, "%s.%s: %v", m.name, s.name, e.Err)
	}
	return nil
}

func (m *msgFields) wrongType(off int, s fieldSpec, got protowire.Type) error {
	want := "varint"
	if s.typ == protowire.BytesType {
		want = "length-delimited"
	}
	return errAt(m.pos+off, "%s.%s: wire type %d, want %s", m.name, s.name, got, want)
}

// uint32 is f's varint value, which must fit 32 bits.
func (m *msgFields) uint32(f *wire.Field) (uint32, error) {
	if f.Varint > math.MaxUint32 {
		return 0, errAt(m.pos+f.Off, "%s.%s: value %d overflows uint32", m.name, m.spec[f.Num].name, f.Varint)
	}
	return uint32(f.Varint), nil
}

// Unmarshal decodes a CommitDataRequest into c, reusing c's slices. The
// input is untrusted: every error names the field and byte offset, and the
// memory used is bounded by len(b) (each entry costs at least two input
// bytes). ChunksToMove[i].Data aliases b. Unknown fields are skipped.
func (c *CommitData) Unmarshal(b []byte) error {
	c.Reset()
	m := fieldsOf(b, 0, "CommitDataRequest", commitSpec)
	for f := m.next(); f != nil; f = m.next() {
		switch f.Num {
		case fieldChunksToMove:
			c.ChunksToMove = append(c.ChunksToMove, ChunkToMove{})
			if err := c.ChunksToMove[len(c.ChunksToMove)-1].unmarshal(f.Bytes, f.ValOff); err != nil {
				return err
			}
		case fieldChunksToPatch:
			if len(c.ChunksToPatch) < cap(c.ChunksToPatch) {
				c.ChunksToPatch = c.ChunksToPatch[:len(c.ChunksToPatch)+1]
			} else {
				c.ChunksToPatch = append(c.ChunksToPatch, ChunkToPatch{})
			}
			if err := c.ChunksToPatch[len(c.ChunksToPatch)-1].unmarshal(f.Bytes, f.ValOff); err != nil {
				return err
			}
		case fieldFlushRequestID:
			c.FlushRequestID = f.Varint
		}
	}
	return m.err
}

func (cm *ChunkToMove) unmarshal(b []byte, pos int) error {
	m := fieldsOf(b, pos, "ChunksToMove", moveSpec)
	var err error
	for f := m.next(); f != nil && err == nil; f = m.next() {
		switch f.Num {
		case fieldMovePage:
			cm.Page, err = m.uint32(f)
		case fieldMoveChunk:
			cm.Chunk, err = m.uint32(f)
		case fieldMoveTarget:
			cm.TargetBuffer, err = m.uint32(f)
		case fieldMoveData:
			cm.Data = f.Bytes[:len(f.Bytes):len(f.Bytes)]
		case fieldMoveIncomplete:
			cm.ChunkIncomplete = f.Varint != 0
		}
	}
	if err != nil {
		return err
	}
	return m.err
}

func (c *ChunkToPatch) unmarshal(b []byte, pos int) error {
	patches := c.Patches[:0]
	*c = ChunkToPatch{}
	m := fieldsOf(b, pos, "ChunkToPatch", patchChunkSpec)
	var err error
	for f := m.next(); f != nil && err == nil; f = m.next() {
		switch f.Num {
		case fieldPatchTarget:
			c.TargetBuffer, err = m.uint32(f)
		case fieldPatchWriter:
			if f.Varint > math.MaxUint16 {
				err = errAt(pos+f.Off, "ChunkToPatch.writer_id: value %d overflows uint16", f.Varint)
			}
			c.WriterID = uint16(f.Varint)
		case fieldPatchChunkID:
			c.ChunkID, err = m.uint32(f)
		case fieldPatchPatches:
			var p Patch
			var ok bool
			ok, err = p.unmarshal(f.Bytes, f.ValOff+pos)
			if ok {
				patches = append(patches, p)
			} else if err == nil {
				c.DiscardedPatches++
			}
		case fieldPatchHasMore:
			c.HasMorePatches = f.Varint != 0
		}
	}
	c.Patches = patches
	if err != nil {
		return err
	}
	return m.err
}

// unmarshal decodes one patch; ok is false (and err nil) when its data is
// not exactly 4 bytes, which discards only that patch.
func (p *Patch) unmarshal(b []byte, pos int) (ok bool, err error) {
	m := fieldsOf(b, pos, "Patch", patchSpec)
	dataLen := -1
	for f := m.next(); f != nil && err == nil; f = m.next() {
		switch f.Num {
		case fieldPatchOffset:
			p.Offset, err = m.uint32(f)
		case fieldPatchData:
			dataLen = len(f.Bytes)
			if dataLen == 4 {
				copy(p.Data[:], f.Bytes)
			}
		}
	}
	if err == nil {
		err = m.err
	}
	if err != nil {
		return false, err
	}
	return dataLen == 4, nil
}
