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

// fieldIter walks the fields of one message.
type fieldIter struct {
	b    []byte
	pos  int // offset of b[0] in the whole request, for errors
	off  int // current offset in b
	name string
}

// next returns the next field; done at the end of b.
func (it *fieldIter) next() (num protowire.Number, typ protowire.Type, start int, done bool, err error) {
	if it.off >= len(it.b) {
		return 0, 0, 0, true, nil
	}
	start = it.off
	num, typ, n := protowire.ConsumeTag(it.b[it.off:])
	if n < 0 {
		return 0, 0, start, false, errAt(it.pos+start, "%s: bad field tag: %v", it.name, protowire.ParseError(n))
	}
	it.off += n
	return num, typ, start, false, nil
}

func (it *fieldIter) varint(field string, typ protowire.Type, start int) (uint64, error) {
	if typ != protowire.VarintType {
		return 0, errAt(it.pos+start, "%s.%s: wire type %d, want varint", it.name, field, typ)
	}
	v, n := protowire.ConsumeVarint(it.b[it.off:])
	if n < 0 {
		return 0, errAt(it.pos+it.off, "%s.%s: %v", it.name, field, protowire.ParseError(n))
	}
	it.off += n
	return v, nil
}

func (it *fieldIter) uint32(field string, typ protowire.Type, start int) (uint32, error) {
	v, err := it.varint(field, typ, start)
	if err != nil {
		return 0, err
	}
	if v > math.MaxUint32 {
		return 0, errAt(it.pos+start, "%s.%s: value %d overflows uint32", it.name, field, v)
	}
	return uint32(v), nil
}

// bytes returns a length-delimited field's contents and their offset in b.
func (it *fieldIter) bytes(field string, typ protowire.Type, start int) ([]byte, int, error) {
	if typ != protowire.BytesType {
		return nil, 0, errAt(it.pos+start, "%s.%s: wire type %d, want length-delimited", it.name, field, typ)
	}
	v, n := protowire.ConsumeBytes(it.b[it.off:])
	if n < 0 {
		return nil, 0, errAt(it.pos+it.off, "%s.%s: %v", it.name, field, protowire.ParseError(n))
	}
	at := it.off + n - len(v)
	it.off += n
	return v, at, nil
}

func (it *fieldIter) skip(num protowire.Number, typ protowire.Type, start int) error {
	n := protowire.ConsumeFieldValue(num, typ, it.b[it.off:])
	if n < 0 {
		return errAt(it.pos+start, "%s: unknown field %d: %v", it.name, num, protowire.ParseError(n))
	}
	it.off += n
	return nil
}

// Unmarshal decodes a CommitDataRequest into c, reusing c's slices. The
// input is untrusted: every error names the field and byte offset, and the
// memory used is bounded by len(b) (each entry costs at least two input
// bytes). ChunksToMove[i].Data aliases b. Unknown fields are skipped.
func (c *CommitData) Unmarshal(b []byte) error {
	c.Reset()
	it := fieldIter{b: b, name: "CommitDataRequest"}
	for {
		num, typ, start, done, err := it.next()
		if done || err != nil {
			return err
		}
		switch num {
		case fieldChunksToMove:
			v, at, err := it.bytes("chunks_to_move", typ, start)
			if err != nil {
				return err
			}
			c.ChunksToMove = append(c.ChunksToMove, ChunkToMove{})
			if err := c.ChunksToMove[len(c.ChunksToMove)-1].unmarshal(v, at); err != nil {
				return err
			}
		case fieldChunksToPatch:
			v, at, err := it.bytes("chunks_to_patch", typ, start)
			if err != nil {
				return err
			}
			if len(c.ChunksToPatch) < cap(c.ChunksToPatch) {
				c.ChunksToPatch = c.ChunksToPatch[:len(c.ChunksToPatch)+1]
			} else {
				c.ChunksToPatch = append(c.ChunksToPatch, ChunkToPatch{})
			}
			if err := c.ChunksToPatch[len(c.ChunksToPatch)-1].unmarshal(v, at); err != nil {
				return err
			}
		case fieldFlushRequestID:
			v, err := it.varint("flush_request_id", typ, start)
			if err != nil {
				return err
			}
			c.FlushRequestID = v
		default:
			if err := it.skip(num, typ, start); err != nil {
				return err
			}
		}
	}
}

func (m *ChunkToMove) unmarshal(b []byte, pos int) error {
	it := fieldIter{b: b, pos: pos, name: "ChunksToMove"}
	for {
		num, typ, start, done, err := it.next()
		if done || err != nil {
			return err
		}
		switch num {
		case fieldMovePage:
			m.Page, err = it.uint32("page", typ, start)
		case fieldMoveChunk:
			m.Chunk, err = it.uint32("chunk", typ, start)
		case fieldMoveTarget:
			m.TargetBuffer, err = it.uint32("target_buffer", typ, start)
		case fieldMoveData:
			var v []byte
			v, _, err = it.bytes("data", typ, start)
			if err == nil {
				m.Data = v[:len(v):len(v)]
			}
		case fieldMoveIncomplete:
			var v uint64
			v, err = it.varint("chunk_incomplete", typ, start)
			m.ChunkIncomplete = v != 0
		default:
			err = it.skip(num, typ, start)
		}
		if err != nil {
			return err
		}
	}
}

func (c *ChunkToPatch) unmarshal(b []byte, pos int) error {
	patches := c.Patches[:0]
	*c = ChunkToPatch{}
	it := fieldIter{b: b, pos: pos, name: "ChunkToPatch"}
	for {
		num, typ, start, done, err := it.next()
		if done || err != nil {
			c.Patches = patches
			return err
		}
		switch num {
		case fieldPatchTarget:
			c.TargetBuffer, err = it.uint32("target_buffer", typ, start)
		case fieldPatchWriter:
			var v uint32
			v, err = it.uint32("writer_id", typ, start)
			if err == nil && v > math.MaxUint16 {
				err = errAt(pos+start, "ChunkToPatch.writer_id: value %d overflows uint16", v)
			}
			c.WriterID = uint16(v)
		case fieldPatchChunkID:
			c.ChunkID, err = it.uint32("chunk_id", typ, start)
		case fieldPatchPatches:
			var v []byte
			var at int
			v, at, err = it.bytes("patches", typ, start)
			if err == nil {
				var p Patch
				var ok bool
				ok, err = p.unmarshal(v, at)
				if ok {
					patches = append(patches, p)
				} else if err == nil {
					c.DiscardedPatches++
				}
			}
		case fieldPatchHasMore:
			var v uint64
			v, err = it.varint("has_more_patches", typ, start)
			c.HasMorePatches = v != 0
		default:
			err = it.skip(num, typ, start)
		}
		if err != nil {
			c.Patches = patches
			return err
		}
	}
}

// unmarshal decodes one patch; ok is false (and err nil) when its data is
// not exactly 4 bytes, which discards only that patch.
func (p *Patch) unmarshal(b []byte, pos int) (ok bool, err error) {
	it := fieldIter{b: b, pos: pos, name: "Patch"}
	dataLen := -1
	for {
		num, typ, start, done, err := it.next()
		if err != nil {
			return false, err
		}
		if done {
			return dataLen == 4, nil
		}
		switch num {
		case fieldPatchOffset:
			p.Offset, err = it.uint32("offset", typ, start)
		case fieldPatchData:
			var v []byte
			v, _, err = it.bytes("data", typ, start)
			dataLen = len(v)
			if len(v) == 4 {
				copy(p.Data[:], v)
			}
		default:
			err = it.skip(num, typ, start)
		}
		if err != nil {
			return false, err
		}
	}
}
