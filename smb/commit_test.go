package smb

import (
	"errors"
	"strings"
	"testing"
)

func TestCommitDataUnmarshalErrors(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"0a 06 08 00 10", "at byte 1: CommitDataRequest.chunks_to_move"},         // length past the end
		{"0a 02 0d 00", "at byte 2: ChunksToMove.page: wire type 5, want varint"}, // fixed32 page
		{"0a 06 08 80 80 80 80 10", "at byte 2: ChunksToMove.page: value 4294967296 overflows uint32"},
		{"12 03 10 80 80", "ChunkToPatch.writer_id"}, // truncated varint
		{"12 04 10 80 80 04", "at byte 2: ChunkToPatch.writer_id: value 65536 overflows uint16"},
		{"18", "at byte 1: CommitDataRequest.flush_request_id"},
		{"ff ff ff ff ff ff ff ff ff ff ff", "at byte 0: CommitDataRequest: bad field tag"},
		{"0f", "at byte 0: CommitDataRequest.chunks_to_move: wire type 7"}, // end-group tag
		// A patch's offsets count from the start of the request, not of
		// its ChunkToPatch (the patch starts at byte 6).
		{"12 06 08 01 22 02 10 80", "at byte 6: Patch.data: wire type 0, want length-delimited"},
		{"12 07 08 01 22 03 08 01 39", "at byte 8: Patch: unknown field 7: unexpected EOF"},
	} {
		var cd CommitData
		err := cd.Unmarshal(unhex(t, c.in))
		if err == nil || !errors.Is(err, ErrMalformedCommit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", c.in, err, c.want)
		}
	}
	// A patch whose data is not 4 bytes is dropped and counted; the others stay.
	var cd CommitData
	in := unhex(t, "12 30 08 01 10 01 18 07 22 07 08 11 12 03 8c 80 80 22 07 08 01 12 04 01 02 03 04 28 01 f8 01 05")
	if err := cd.Unmarshal(in); err == nil {
		t.Fatal("expected error for the truncated trailing field")
	}
	in = unhex(t, "12 1b 08 01 10 01 18 07 22 07 08 11 12 03 8c 80 80 22 08 08 01 12 04 01 02 03 04 28 01 f8 01 05")
	if err := cd.Unmarshal(in); err != nil {
		t.Fatal(err)
	}
	p := cd.ChunksToPatch[0]
	if p.DiscardedPatches != 1 || len(p.Patches) != 1 || p.Patches[0] != (Patch{Offset: 1, Data: [4]byte{1, 2, 3, 4}}) || !p.HasMorePatches {
		t.Fatalf("decoded %+v", p)
	}
	// Reuse: decoding a smaller request into the same value leaves nothing behind.
	if err := cd.Unmarshal(unhex(t, "18 05")); err != nil || len(cd.ChunksToPatch) != 0 || cd.FlushRequestID != 5 {
		t.Fatalf("reuse: %+v %v", cd, err)
	}
}

// Decoding into a reused CommitData allocates nothing once its slices have
// grown: the service decodes every commit of every producer.
func TestCommitDataUnmarshalAllocs(t *testing.T) {
	_, b := sampleSMB(t, LayoutDiv1, true)
	in := unhex(t, "12 1b 08 01 10 01 18 07 22 07 08 11 12 03 8c 80 80 22 08 08 01 12 04 01 02 03 04 28 01 f8 01 05")
	var cd CommitData
	for _, m := range [][]byte{b, in} {
		if err := cd.Unmarshal(m); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = cd.Unmarshal(m) }); n != 0 {
			t.Errorf("%v allocations per Unmarshal of %d bytes", n, len(m))
		}
	}
}
