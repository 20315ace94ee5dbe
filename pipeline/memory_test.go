package pipeline

import (
	"fmt"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// Every owner of buffer memory gives it back: the session its buffers at
// the end, a snapshot its clone memory once written, transfer_on_clone
// the moved buffer once the snapshot read it, clear_before_clone the
// dropped one at once. Status.Memory reports the components meanwhile.
// (Not parallel: buffer.MappedBytes is process-wide; mapped() adds back
// what the collector released of buffers other tests dropped meanwhile.)
func TestSessionGivesMemoryBack(t *testing.T) {
	for _, tc := range []struct{ transfer, clear bool }{{false, false}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("transfer=%v,clear=%v", tc.transfer, tc.clear), func(t *testing.T) {
			before := mapped()
			s, _, stop := snapshotSession(t, "buffers[0].size_kb=8192",
				fmt.Sprint("buffers[0].transfer_on_clone=", tc.transfer), fmt.Sprint("buffers[0].clear_before_clone=", tc.clear))
			// ring_buffer.yaml has a second buffer (process data) beside the ring.
			var rings int64
			for _, b := range s.cfg.Buffers {
				rings += int64(b.SizeKB) << 10
			}
			testsupport.WaitUntil(t, "the memory status", 20*time.Second, func() bool { return s.Status().Memory.Buffers == rings })
			if m := s.Status().Memory; m.SMBs <= 0 || m.Batches != int64(s.free.capacity()*batchMem) || m.Total() != m.Buffers+m.SMBs+m.Clones+m.Batches {
				t.Fatalf("memory status %+v: want the producers' SMBs and the output batches counted", m)
			}
			for i := range 2 {
				if r := <-s.Snapshot(SnapshotRequest{Trigger: fmt.Sprint("mem", i)}); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			testsupport.WaitUntil(t, "the clone memory given back", 20*time.Second, func() bool { return s.Status().Memory.Clones == 0 })
			if got := mapped() - before; got != rings {
				t.Fatalf("after the snapshots %d bytes of buffers mapped, want the live rings' %d", got, rings)
			}
			stop()
			for i, bs := range s.buffers {
				if !bs.buf.Closed() {
					t.Fatalf("buffer %d still open after the session", i)
				}
			}
			if got := mapped() - before; got > 0 {
				t.Fatalf("%d bytes of buffers still mapped after the session", got)
			}
			if m := s.Status().Memory; m.Buffers != 0 || m.SMBs != 0 || m.Clones != 0 || m.Batches != 0 {
				t.Fatalf("memory status after the session: %+v", m)
			}
		})
	}
}

// The heap budget grows with what the configuration puts on the heap.
func TestHeapBudgetFollowsConfig(t *testing.T) {
	s, _, stop := snapshotSession(t)
	base := s.HeapBudget()
	stop()
	if base < heapBase+int64(outputBatches)*batchIndexHeap {
		t.Fatalf("budget %d below the base and the output batches' index", base)
	}
	s2, _, stop2 := snapshotSession(t, "data_sources[0].protovm.memory_limit_kb=4096", "sinks[0].queue_capacity=64",
		"producers.smb_size_kb=8192")
	defer stop2()
	// The in-process synthetic source's SMB is mapped outside the heap
	// (smb.NewPrivateSMB): it does not count.
	want := base + 48*batchIndexHeap + protoVMSequences*(4096-1024)<<10
	if got := s2.HeapBudget(); got < want || got >= want+(8192-256)<<10 {
		t.Fatalf("budget %d with a bigger queue, ProtoVM limit and SMB, want %d (the SMB is not on the heap)", got, want)
	}
}

func mapped() int64 {
	_, leaked := buffer.UnclosedBuffers()
	return buffer.MappedBytes() + leaked
}
