package smb_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/smb"
)

// A scrape walks the SMB page by page while the producer keeps writing. A
// writer can finish the chunk the walk has just passed (it held no
// finished packet then, so it was skipped) and go on in a chunk the walk
// has not reached yet. The walk then hands out the later chunk without the
// earlier one: the trace buffer reads past the hole, and when the earlier
// chunk's commit arrives its id is behind what was read, so it is
// discarded as stale (chunks_discarded) — packets lost under the stall
// policy, on a loaded machine where the service goroutine is preempted
// mid-walk. A scrape must hand out no chunk of a writer without every
// earlier chunk of that writer that is still in the SMB.
func TestScrapeLeavesNoHoleBehindAWriter(t *testing.T) {
	s, err := smb.NewHeapSMB(8*4096, 4096) // one 4080-byte payload chunk per page
	if err != nil {
		t.Fatal(err)
	}
	var commits []*smb.CommitData
	arb, err := smb.NewArbiter(s, smb.ArbiterOptions{Commit: smb.CommitBatched,
		OnCommit: func(cd *smb.CommitData) {
			c := &smb.CommitData{}
			if err := c.Unmarshal(cd.AppendMarshal(nil)); err != nil {
				t.Fatal(err)
			}
			commits = append(commits, c)
		}})
	if err != nil {
		t.Fatal(err)
	}
	w1, err := arb.NewTraceWriter(1, smb.Stall)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := arb.NewTraceWriter(1, smb.Stall)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint16][][]byte{}
	firstOnSeq := []byte{0xb8, 0x05, 0x01} // the writer's first_packet_on_sequence

	// w1's chunk (page 0) holds one unfinished packet: a scrape skips it.
	open := w1.NewTracePacket()
	openField := bytes.Repeat([]byte{0xaa}, 100)
	open.AppendBytes(1, openField)
	want[w1.ID()] = append(want[w1.ID()], protowire.AppendBytes(protowire.AppendTag(bytes.Clone(firstOnSeq), 1, protowire.BytesType), openField))
	// w2's chunk (page 1) is Complete, its commit pending.
	p2 := bytes.Repeat([]byte{0xbb}, 200)
	if err := w2.WritePacket(p2); err != nil {
		t.Fatal(err)
	}
	want[w2.ID()] = append(want[w2.ID()], append(bytes.Clone(firstOnSeq), p2...))
	if err := w2.Flush(); err != nil {
		t.Fatal(err)
	}

	buf, err := buffer.New(1<<20, buffer.RingBuffer)
	if err != nil {
		t.Fatal(err)
	}
	copyChunk := func(v *smb.ChunkView) {
		payload := v.Payload
		if !v.Complete {
			payload = append(bytes.Clone(payload), make([]byte, v.PayloadCapacity-len(payload))...)
		}
		buf.CopyChunkUntrusted(1, buffer.ClientIdentity{}, v.WriterID, v.ChunkID, v.Fragments, v.Flags, v.Complete, payload)
	}
	got := map[uint16][][]byte{}
	read := func() {
		buf.BeginRead()
		var p buffer.Packet
		for buf.ReadNextTracePacket(&p) {
			if p.PreviousPacketDropped != 0 {
				t.Errorf("writer %d packet %d: previous packet dropped (%#x)", p.Seq.WriterID, len(got[p.Seq.WriterID]), p.PreviousPacketDropped)
			}
			got[p.Seq.WriterID] = append(got[p.Seq.WriterID], p.AppendTo(nil))
		}
	}

	// The walk passes page 0 (w1's chunk has no finished packet), then
	// hands out w2's chunk on page 1. While it does, w1 finishes its packet
	// and writes on: its packets fill page 0's chunk, the fourth continues
	// into a new chunk on page 2, and a fifth follows it there. The walk
	// then reaches page 2.
	r := smb.NewReader(s)
	var order []string
	wrote := false
	r.Scrape(func(v *smb.ChunkView) {
		order = append(order, fmt.Sprintf("w%d/c%d/p%d/complete=%v", v.WriterID, v.ChunkID, v.Page, v.Complete))
		copyChunk(v)
		if wrote {
			return
		}
		wrote = true
		if err := open.Finish(); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			p := bytes.Repeat([]byte{byte(0x10 + i)}, 1200)
			if err := w1.WritePacket(p); err != nil {
				t.Fatal(err)
			}
			want[w1.ID()] = append(want[w1.ID()], p)
		}
	})
	if len(order) < 2 {
		t.Fatalf("the scrape handed out %v: the test needs w2's chunk and w1's chunk on page 2", order)
	}
	read()
	// Every commit then arrives, and the writers' last chunks.
	arb.FlushPendingCommits()
	if err := w1.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, cd := range commits {
		r.ReadCommit(cd, copyChunk, nil)
	}
	read()

	st := buf.Stats()
	if st.ChunksDiscarded != 0 || st.AbiViolations != 0 {
		t.Errorf("chunks_discarded %d, abi_violations %d after a scrape in order %v", st.ChunksDiscarded, st.AbiViolations, order)
	}
	for _, id := range []uint16{w1.ID(), w2.ID()} {
		if len(got[id]) != len(want[id]) {
			t.Errorf("writer %d: read %d packets, want %d (scrape order %v)", id, len(got[id]), len(want[id]), order)
			continue
		}
		for i := range want[id] {
			if !bytes.Equal(got[id][i], want[id][i]) {
				t.Errorf("writer %d packet %d: %d bytes %x..., want %d bytes %x...", id, i, len(got[id][i]), got[id][i][:8], len(want[id][i]), want[id][i][:8])
			}
		}
	}
}
