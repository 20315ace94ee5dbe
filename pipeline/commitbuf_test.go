package pipeline

import (
	"testing"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/smb"
)

// A producer whose commits wait in a full commit queue (while a read
// pass runs) finds its encoding buffers again once the service handled
// them: a queue's worth of commits cycles without allocating. Buffers
// over the free list's byte bound are dropped, not kept.
func TestCommitBuffersRecycleAQueueful(t *testing.T) {
	p := newProducer(producerSpec{id: 1, target: 0}, nil, buffer.ClientIdentity{}, nil, nil, nil)
	var cd smb.CommitData
	for i := range 12 { // a posted commit of a dozen chunks
		cd.ChunksToMove = append(cd.ChunksToMove, smb.ChunkToMove{Page: uint32(i), Chunk: 0, TargetBuffer: 1})
	}
	queued := make([][]byte, 0, commitQueueLen)
	cycle := func() {
		for range commitQueueLen {
			queued = append(queued, cd.AppendMarshal(p.commitBuffer()))
		}
		for _, b := range queued {
			p.recycle(b)
		}
		queued = queued[:0]
	}
	cycle() // the first queueful allocates its buffers
	if n := testing.AllocsPerRun(20, cycle); n != 0 {
		t.Fatalf("%.0f allocations per queueful of %d commits, want 0", n, commitQueueLen)
	}
	big := make([]byte, 0, maxFreeCommitBytes)
	p.recycle(big)
	if got := p.freeBytes.Load(); got > maxFreeCommitBytes {
		t.Fatalf("the free list keeps %d bytes, over its bound of %d", got, maxFreeCommitBytes)
	}
}

// BenchmarkCommitBufferQueueful encodes and recycles a commit queue's
// worth of commits per op, as a producer whose commits wait out a read
// pass does: 0 allocs/op.
func BenchmarkCommitBufferQueueful(b *testing.B) {
	p := newProducer(producerSpec{id: 1, target: 0}, nil, buffer.ClientIdentity{}, nil, nil, nil)
	var cd smb.CommitData
	for i := range 12 {
		cd.ChunksToMove = append(cd.ChunksToMove, smb.ChunkToMove{Page: uint32(i), TargetBuffer: 1})
	}
	queued := make([][]byte, 0, commitQueueLen)
	cycle := func() {
		for range commitQueueLen {
			queued = append(queued, cd.AppendMarshal(p.commitBuffer()))
		}
		for _, q := range queued {
			p.recycle(q)
		}
		queued = queued[:0]
	}
	cycle() // the first queueful allocates the buffers (b.Loop starts the count)
	b.ReportAllocs()
	for b.Loop() {
		cycle()
	}
}
