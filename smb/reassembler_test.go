package smb

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// storedChunk is the reassembler's private copy of one chunk.
type storedChunk struct {
	payload   []byte
	fragments int
	flags     uint8
	aborted   bool
}

// reassembler is a minimal service-side buffer for tests: it copies chunks
// handed out by the Reader, applies patches, and rebuilds each writer's
// packets in chunk-id order with the fragment flags.
type reassembler struct {
	mu          sync.Mutex
	chunks      map[uint16]map[uint32]*storedChunk
	badPatches  int
	duplicates  int
	patchGroups int
	// sentinelErr collects ChunkView.WithSentinel inconsistencies.
	sentinelErr error
}

func newReassembler() *reassembler {
	return &reassembler{chunks: map[uint16]map[uint32]*storedChunk{}}
}

func (ra *reassembler) addChunk(v *ChunkView) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	m := ra.chunks[v.WriterID]
	if m == nil {
		m = map[uint32]*storedChunk{}
		ra.chunks[v.WriterID] = m
	}
	if _, dup := m[v.ChunkID]; dup {
		ra.duplicates++
	}
	m[v.ChunkID] = &storedChunk{payload: slices.Clone(v.Payload), fragments: int(v.Fragments), flags: v.Flags, aborted: v.Aborted}
	ra.sentinelErr = errors.Join(ra.sentinelErr, checkWithSentinel(v))
}

// checkWithSentinel verifies ChunkView.WithSentinel: nil unless Aborted,
// else Payload followed by exactly one size varint holding DropPacketSize.
func checkWithSentinel(v *ChunkView) error {
	if v.PayloadCapacity < len(v.Payload) || v.PayloadCapacity < len(v.WithSentinel) {
		return fmt.Errorf("chunk %d: PayloadCapacity %d below the payload's %d bytes", v.ChunkID, v.PayloadCapacity, len(v.Payload))
	}
	if !v.Aborted {
		if v.WithSentinel != nil {
			return fmt.Errorf("chunk %d: WithSentinel set on a chunk that was not aborted", v.ChunkID)
		}
		return nil
	}
	if len(v.WithSentinel) <= len(v.Payload) || !bytes.Equal(v.WithSentinel[:len(v.Payload)], v.Payload) {
		return fmt.Errorf("chunk %d: WithSentinel %x does not extend Payload %x", v.ChunkID, v.WithSentinel, v.Payload)
	}
	size, n := protowire.ConsumeVarint(v.WithSentinel[len(v.Payload):])
	if n != len(v.WithSentinel)-len(v.Payload) || size != DropPacketSize {
		return fmt.Errorf("chunk %d: WithSentinel tail %x is not one drop-sentinel varint", v.ChunkID, v.WithSentinel[len(v.Payload):])
	}
	return nil
}

func (ra *reassembler) applyPatch(p *ChunkToPatch) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	ra.patchGroups++
	c := ra.chunks[p.WriterID][p.ChunkID]
	if c == nil {
		ra.badPatches += len(p.Patches)
		return
	}
	for _, pp := range p.Patches {
		if uint64(pp.Offset)+4 > uint64(len(c.payload)) {
			ra.badPatches++
			continue
		}
		copy(c.payload[pp.Offset:], pp.Data[:])
	}
	if !p.HasMorePatches {
		c.flags &^= FlagChunkNeedsPatching
	}
}

// reassembled holds one writer's rebuilt packets and what was lost.
type reassembled struct {
	packets [][]byte
	lost    int
}

// packets rebuilds writer id's packets. It fails if a chunk still needs
// patching or a chunk's fragments do not parse.
func (ra *reassembler) packets(id uint16) (reassembled, error) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	var out reassembled
	m := ra.chunks[id]
	ids := make([]uint32, 0, len(m))
	for cid := range m {
		ids = append(ids, cid)
	}
	slices.Sort(ids)
	var pending []byte
	have := false
	for i, cid := range ids {
		c := m[cid]
		if c.flags&FlagChunkNeedsPatching != 0 {
			return out, fmt.Errorf("writer %d chunk %d still needs patching", id, cid)
		}
		if have && (i == 0 || ids[i-1] != cid-1) {
			have, pending = false, nil
			out.lost++
		}
		frags, err := splitFragments(c.payload, c.fragments)
		if err != nil {
			return out, fmt.Errorf("writer %d chunk %d: %v", id, cid, err)
		}
		for k, f := range frags {
			continues := k == 0 && c.flags&FlagFirstPacketContinuesFromPrevChunk != 0
			opensNext := k == len(frags)-1 && c.flags&FlagLastPacketContinuesOnNextChunk != 0 && !c.aborted
			if !continues && have {
				have, pending = false, nil
				out.lost++
			}
			if continues && !have {
				out.lost++ // orphan continuation
				continue
			}
			if !continues && !opensNext && len(f) == 0 {
				continue // padding
			}
			pending = append(pending, f...)
			have = true
			if opensNext {
				continue
			}
			out.packets = append(out.packets, pending)
			have, pending = false, nil
		}
		if c.aborted { // the packet the sentinel fragment belonged to is lost
			have, pending = false, nil
			out.lost++
		}
	}
	return out, nil
}

func splitFragments(payload []byte, n int) ([][]byte, error) {
	end, got, _, why := ParseFragments(payload, n)
	if why >= 0 {
		return nil, fmt.Errorf("fragments: %v", why)
	}
	frags := make([][]byte, 0, got)
	off := 0
	for off < end {
		size, vl := consumeVarintTest(payload[off:])
		off += vl
		frags = append(frags, payload[off:off+int(size)])
		off += int(size)
	}
	return frags, nil
}

func consumeVarintTest(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}
