package buffer

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
)

// TestIncrementalCloneMatchesCloneReadOnly drives a ring buffer with
// random writes (several writers, fragmented packets, out-of-order ids),
// reads and patches while an incremental clone copies in small slices,
// and holds the finished clone against CloneReadOnly taken at the same
// instant: same memory, same packets read back. The live buffer must
// behave as a twin that was never cloned.
func TestIncrementalCloneMatchesCloneReadOnly(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { incrementalCloneRun(t, seed) })
	}
}

func incrementalCloneRun(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	const size = 64 << 10
	live := scNew(t, size, RingBuffer)
	twin := scNew(t, size, RingBuffer)
	ids := map[uint16]uint32{}
	op := func() {
		w := uint16(1 + rng.Intn(4))
		switch r := rng.Intn(20); {
		case r < 14:
			id := ids[w]
			ids[w]++
			n := 16 + rng.Intn(3000)
			c := byte('a' + rng.Intn(26))
			var flags uint8
			if rng.Intn(5) == 0 {
				flags = scOn // the packet continues in the next chunk
			}
			newChunk(t, live, 1, w, id).AddPacket(n, c, flags).Copy()
			newChunk(t, twin, 1, w, id).AddPacket(n, c, flags).Copy()
		case r < 17:
			a, oka := readOne(live)
			b, okb := readOne(twin)
			if oka != okb || !reflect.DeepEqual(a, b) {
				t.Fatalf("live read %v %+v, twin %v %+v", oka, a, okb, b)
			}
		case r < 19:
			if ids[w] > 0 {
				id := ids[w] - 1
				pt := []Patch{scPatchOf(4, "ZZZZ")}
				la := live.TryPatchChunkContents(1, w, id, pt, false)
				tw := twin.TryPatchChunkContents(1, w, id, pt, false)
				if la != tw {
					t.Fatalf("patch: live %v, twin %v", la, tw)
				}
			}
		default:
			live.BeginRead()
			twin.BeginRead()
		}
	}
	for range 100 + rng.Intn(200) {
		op()
	}
	ref := live.CloneReadOnly()
	p, err := live.beginClone(make([]byte, live.Size()), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := live.BeginClone(make([]byte, live.Size())); err == nil && !p.Done() {
		t.Fatal("a second clone started while one is pending")
	}
	for !p.Done() {
		op()
		if rng.Intn(3) == 0 {
			p.Step(rng.Intn(3 * 4096))
		}
	}
	if live.cow != nil {
		t.Fatal("the live buffer still guards writes after the clone finished")
	}
	got := p.Clone()
	if !bytes.Equal(got.mem[:ref.usedSize], ref.mem[:ref.usedSize]) {
		t.Fatal("clone memory differs from CloneReadOnly's")
	}
	if a, b := readPackets(got), readPackets(ref); !reflect.DeepEqual(a, b) {
		t.Fatalf("clone reads %d packets, CloneReadOnly %d", len(a), len(b))
	}
	for range 200 {
		op()
	}
	if a, b := readPackets(live), readPackets(twin); !reflect.DeepEqual(a, b) {
		t.Fatalf("live buffer reads %d packets, its never-cloned twin %d", len(a), len(b))
	}
}

func TestBeginCloneRejectsWrongMemorySize(t *testing.T) {
	b := scNew(t, 8192, RingBuffer)
	if _, err := b.BeginClone(make([]byte, 4096)); err == nil {
		t.Fatal("BeginClone accepted memory of the wrong size")
	}
}

func TestPendingCloneCloneBeforeDonePanics(t *testing.T) {
	b := scNew(t, 3*4096, RingBuffer)
	for i := range uint32(6) {
		newChunk(t, b, 1, 1, i).AddPacket(1500, 'x', 0).Copy()
	}
	p, err := b.beginClone(make([]byte, b.Size()), 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Clone of an unfinished copy did not panic")
		}
	}()
	p.Clone()
}

// BenchmarkCloneStep is the service's pause per clone step: one slice
// copied into pre-faulted memory (the snapshot's design), against the
// whole-buffer CloneReadOnly into fresh memory.
func BenchmarkCloneStep(b *testing.B) {
	for _, mib := range []int{64, 256} {
		buf := scNew(b, mib<<20, RingBuffer)
		for i := uint32(0); buf.usedSize < buf.Size()-8192; i++ {
			newChunk(b, buf, 1, 1, i).AddPacket(4000, 'x', 0).Copy()
		}
		mem := make([]byte, buf.Size())
		for i := range mem { // pre-fault, as the snapshot goroutine does
			mem[i] = 1
		}
		b.Run(fmt.Sprintf("slice/%dMiB", mib), func(b *testing.B) {
			b.SetBytes(CloneSliceSize)
			b.ReportAllocs()
			for b.Loop() {
				p, err := buf.BeginClone(mem)
				if err != nil {
					b.Fatal(err)
				}
				p.Step(CloneSliceSize)
				p.Abandon()
			}
		})
		b.Run(fmt.Sprintf("whole/%dMiB", mib), func(b *testing.B) {
			b.SetBytes(int64(buf.Size()))
			for b.Loop() {
				buf.CloneReadOnly()
			}
		})
	}
}
