package buffer

// Patch is one 4-byte patch of a chunk still in the buffer. Offset is
// relative to the start of the chunk payload.
type Patch struct {
	Offset uint32
	Data   [4]byte
}

// TryPatchChunkContents applies patches, in order, to chunk chunkID of
// (producer, writer) if it is still in the buffer. A patch must lie within
// the chunk's valid fragment bytes; the first one that does not fails the
// call (earlier patches of the batch stay applied). Unless
// otherwisePending, the chunk stops waiting for patches, which unblocks
// its sequence. On a read-only clone the call fails.
func (b *TraceBuffer) TryPatchChunkContents(producer, writer uint16, chunkID uint32,
	patches []Patch, otherPatchesPending bool) bool {
	if b.readOnly {
		b.stats.PatchesFailed++
		return false
	}
	s := b.lookupSeq(seqKey(producer, writer))
	if s == nil {
		b.stats.PatchesFailed++
		return false
	}
	i := s.find(chunkID)
	if i < 0 {
		b.stats.PatchesFailed++
		return false
	}
	off := int(s.at(i).off)
	plen := b.recPayload(off)
	base := off + hdrSize
	b.guard(off, hdrSize+plen)
	for k := range patches {
		pt := &patches[k]
		if plen < 4 || int(pt.Offset) > plen-4 {
			b.stats.PatchesFailed++
			return false
		}
		b.mem[off+hdrAux] |= auxPatched
		copy(b.mem[base+int(pt.Offset):base+int(pt.Offset)+4], pt.Data[:])
	}
	b.stats.PatchesSucceeded += uint64(len(patches))
	if !otherPatchesPending {
		b.mem[off+hdrFlags] &^= flagNeedsPatching
	}
	return true
}
