package smb_test

import (
	"bytes"
	"testing"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/smb"
)

// A chunk a writer has finished sits Complete in the SMB until its batched
// commit reaches the service. A flush scrape in that window copies it into
// the trace buffer, a read pass consumes it, and then the commit arrives.
// That commit must not count a loss: the chunk's packets were delivered,
// exactly once. (Perfetto copies the chunk again and its trace buffer
// discards the stale copy with chunks_discarded++, which tracepipe reports
// as data loss; under the stall policy that was "loss" in a lossless run.)
func TestScrapedCompleteChunkCommittedAfterRead(t *testing.T) {
	s, err := smb.NewHeapSMB(8*4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var commits [][]byte
	arb, err := smb.NewArbiter(s, smb.ArbiterOptions{Commit: smb.CommitBatched,
		OnCommit: func(cd *smb.CommitData) { commits = append(commits, cd.AppendMarshal(nil)) }})
	if err != nil {
		t.Fatal(err)
	}
	w, err := arb.NewTraceWriter(1, smb.Stall)
	if err != nil {
		t.Fatal(err)
	}
	// The packets fill chunk 0's 4080 payload bytes exactly (each has a
	// 4-byte size; the writer prefixes the first one with 3 bytes of
	// first_packet_on_sequence), so none continues into chunk 1; the
	// fifth starts chunk 1 and chunk 0 is returned Complete, its commit
	// batched. The bytes are opaque to the SMB and the trace buffer.
	var want [][]byte
	for i, n := range []int{4080 - 3*1004 - 4 - 3, 1000, 1000, 1000, 1000} {
		p := bytes.Repeat([]byte{byte(i + 1)}, n)
		if err := w.WritePacket(p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
	}
	if len(commits) != 0 {
		t.Fatalf("%d commits delivered before FlushPendingCommits: the test needs chunk 0 pending", len(commits))
	}

	buf, err := buffer.New(1<<20, buffer.RingBuffer)
	if err != nil {
		t.Fatal(err)
	}
	r := smb.NewReader(s)
	copyChunk := func(v *smb.ChunkView) {
		payload := v.Payload
		if !v.Complete {
			payload = append(bytes.Clone(payload), make([]byte, v.PayloadCapacity-len(payload))...)
		}
		buf.CopyChunkUntrusted(1, buffer.ClientIdentity{}, v.WriterID, v.ChunkID, v.Fragments, v.Flags, v.Complete, payload)
	}
	var got [][]byte
	read := func() {
		buf.BeginRead()
		var p buffer.Packet
		for buf.ReadNextTracePacket(&p) {
			if p.PreviousPacketDropped != 0 {
				t.Errorf("packet %d: previous packet dropped (%#x)", len(got), p.PreviousPacketDropped)
			}
			got = append(got, p.AppendTo(nil))
		}
	}

	scrapedComplete := 0
	r.Scrape(func(v *smb.ChunkView) {
		if v.Complete {
			scrapedComplete++
			if v.Flags&smb.FlagLastPacketContinuesOnNextChunk != 0 {
				t.Fatal("chunk 0's last packet continues: the test needs it whole")
			}
		}
		copyChunk(v)
	})
	if scrapedComplete != 1 {
		t.Fatalf("scraped %d Complete chunks, want chunk 0", scrapedComplete)
	}
	read()
	if len(got) != 4 {
		t.Fatalf("read %d packets after the scrape, want chunk 0's 4", len(got))
	}

	// A second flush's scrape before the commit must not hand it out again.
	r.Scrape(func(v *smb.ChunkView) {
		if v.Complete {
			t.Errorf("chunk %d handed out Complete by a second scrape", v.ChunkID)
		}
	})

	w.Flush() // returns chunk 1; commits chunk 0 and chunk 1
	arb.FlushPendingCommits()
	var cd smb.CommitData
	for _, rec := range commits {
		if err := cd.Unmarshal(rec); err != nil {
			t.Fatal(err)
		}
		r.ReadCommit(&cd, copyChunk, nil)
	}
	read()

	if len(got) != len(want) {
		t.Fatalf("read %d packets, want %d (each exactly once)", len(got), len(want))
	}
	for i := range want {
		// The writer may prefix a packet (first_packet_on_sequence).
		if !bytes.HasSuffix(got[i], want[i]) {
			t.Errorf("packet %d differs", i)
		}
	}
	if st := buf.Stats(); st.ChunksDiscarded != 0 || st.AbiViolations != 0 {
		t.Errorf("chunks_discarded %d, abi_violations %d: a delivered chunk was counted as lost", st.ChunksDiscarded, st.AbiViolations)
	}
	if st := r.Stats(); st.CommitsAlreadyScraped != 1 || st.TotalRejected() != 0 {
		t.Errorf("commits_already_scraped %d (want 1), rejected %d", st.CommitsAlreadyScraped, st.TotalRejected())
	}
	for p := range s.NumPages() {
		if bm := s.PageBitmap(p); bm != 0 && smb.StateOf(bm, 0) != smb.ChunkFree && smb.StateOf(bm, 0) != smb.ChunkBeingWritten {
			t.Errorf("page %d chunk 0 left in state %v", p, smb.StateOf(bm, 0))
		}
	}
}
