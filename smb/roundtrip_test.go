package smb

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

var long = flag.Bool("long", false, "run long randomized round trips")

// The random packet schema: 1 bytes, 2 varint, 3 nested (same schema),
// 4 fixed64, 5 fixed32. Packets built field by field are compared after
// canonicalization, because a nested size is 1 or 4 bytes depending on
// where the chunk boundaries fall.

// genPacket builds a random packet of about size bytes, writing it through
// m when m is non-nil, and returns its canonical encoding.
func genPacket(rng *rand.Rand, size, depth int, m *Message) []byte {
	var out []byte
	for len(out) < size {
		switch k := rng.IntN(10); {
		case k < 4 || depth >= 4:
			n := min(size-len(out), rng.IntN(size-len(out)+1))
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if m != nil {
				m.AppendBytes(1, b)
			}
			out = protowire.AppendTag(out, 1, protowire.BytesType)
			out = protowire.AppendBytes(out, b)
		case k < 6:
			v := rng.Uint64() >> rng.IntN(64)
			if m != nil {
				m.AppendVarint(2, v)
			}
			out = protowire.AppendTag(out, 2, protowire.VarintType)
			out = protowire.AppendVarint(out, v)
		case k < 7:
			v := rng.Uint64()
			if m != nil {
				m.AppendFixed64(4, v)
			}
			out = protowire.AppendTag(out, 4, protowire.Fixed64Type)
			out = protowire.AppendFixed64(out, v)
		case k < 8:
			v := rng.Uint32()
			if m != nil {
				m.AppendFixed32(5, v)
			}
			out = protowire.AppendTag(out, 5, protowire.Fixed32Type)
			out = protowire.AppendFixed32(out, v)
		default:
			var child *Message
			if m != nil {
				c := m.BeginNested(3)
				child = &c
			}
			inner := genPacket(rng, rng.IntN(size-len(out)+1), depth+1, child)
			if child != nil && rng.IntN(2) == 0 {
				child.End() // otherwise closed implicitly by the next write
			}
			out = protowire.AppendTag(out, 3, protowire.BytesType)
			out = protowire.AppendBytes(out, inner)
		}
	}
	return out
}

// canonical re-encodes a packet of the random schema with minimal sizes.
func canonical(b []byte) ([]byte, error) {
	var out []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		v := b[:m]
		b = b[m:]
		if num == 3 && typ == protowire.BytesType {
			inner, _ := protowire.ConsumeBytes(v)
			c, err := canonical(inner)
			if err != nil {
				return nil, err
			}
			out = protowire.AppendTag(out, num, typ)
			out = protowire.AppendBytes(out, c)
			continue
		}
		out = protowire.AppendTag(out, num, typ)
		if typ == protowire.VarintType {
			x, _ := protowire.ConsumeVarint(v)
			out = protowire.AppendVarint(out, x)
		} else {
			out = append(out, v...)
		}
	}
	return out, nil
}

func randomSize(rng *rand.Rand) int {
	switch k := rng.IntN(100); {
	case k < 60:
		return rng.IntN(130)
	case k < 90:
		return rng.IntN(5000)
	case k < 99:
		return rng.IntN(64 << 10)
	default:
		return rng.IntN(2<<20 + 1)
	}
}

// serviceLoop decodes marshalled commits and reads them like a service,
// scraping now and then. A Complete chunk is handed out once, by a scrape
// or by its commit, so scraped Complete chunks go to ra with the
// committed ones; incomplete scrapes go to a reassembler of their own.
func serviceLoop(t *testing.T, s *SMB, commits <-chan []byte, ra *reassembler) *ReaderStats {
	r := NewReader(s)
	var cd CommitData
	scraped := newReassembler()
	for i := 0; ; i++ {
		rec, ok := <-commits
		if !ok {
			return r.Stats()
		}
		if err := cd.Unmarshal(rec); err != nil {
			t.Errorf("commit: %v", err)
			continue
		}
		r.ReadCommit(&cd, ra.addChunk, ra.applyPatch)
		if i%17 == 0 {
			r.Scrape(func(v *ChunkView) {
				if v.Complete {
					ra.addChunk(v)
				} else {
					scraped.addChunk(v)
				}
			})
		}
	}
}

// backing is the memory an SMB of a test lives in.
type backing string

const (
	onHeap  backing = "heap"
	inMemfd backing = "memfd"
	private backing = "private"
)

// newTestSMB returns an SMB of size bytes in pages of pageSize, backed as asked.
func newTestSMB(b backing, size, pageSize int) (*SMB, error) {
	switch b {
	case inMemfd:
		return NewMemfdSMB("tracepipe-test", size, pageSize)
	case private:
		return NewPrivateSMB(size, pageSize)
	}
	return NewHeapSMB(size, pageSize)
}

func runRoundTrip(t *testing.T, seed uint64, writers, packets int, layout PageLayout, policy CommitPolicy, mem backing) {
	s, err := newTestSMB(mem, 256<<10, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commits := make(chan []byte, 256)
	arb, err := NewArbiter(s, ArbiterOptions{Layout: layout, Commit: policy, OnCommit: func(cd *CommitData) {
		commits <- cd.AppendMarshal(nil)
	}})
	if err != nil {
		t.Fatal(err)
	}
	ra := newReassembler()
	var stats *ReaderStats
	done := make(chan struct{})
	go func() { stats = serviceLoop(t, s, commits, ra); close(done) }()

	want := make([][][]byte, writers)
	ids := make([]uint16, writers)
	var wg sync.WaitGroup
	for wi := range writers {
		w, err := arb.NewTraceWriter(1, Stall)
		if err != nil {
			t.Fatal(err)
		}
		ids[wi] = w.ID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(wi)))
			for i := range packets {
				size := randomSize(rng)
				var canon []byte
				if rng.IntN(2) == 0 {
					p := genPacket(rng, size, 0, nil)
					if err := w.WritePacket(p); err != nil {
						t.Error(err)
						return
					}
					canon = p
				} else {
					tp := w.NewTracePacket()
					canon = genPacket(rng, size, 0, &tp.Message)
					if err := tp.Finish(); err != nil {
						t.Error(err)
						return
					}
				}
				if i == 0 {
					canon = append([]byte{0xb8, 0x05, 0x01}, canon...)
				}
				if len(canon) > 0 { // empty packets are zero-length fragments: padding
					want[wi] = append(want[wi], canon)
				}
				if rng.IntN(50) == 0 {
					if err := w.Flush(); err != nil {
						t.Error(err)
					}
				}
			}
			if err := w.Close(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	arb.FlushPendingCommits()
	close(commits)
	<-done
	if stats.TotalRejected() != 0 || stats.PatchesDiscarded != 0 || ra.badPatches != 0 || ra.duplicates != 0 {
		t.Errorf("reader rejections %+v, bad patches %d, chunks handed out twice %d", stats, ra.badPatches, ra.duplicates)
	}
	for wi, id := range ids {
		got, err := ra.packets(id)
		if err != nil {
			t.Fatal(err)
		}
		if got.lost != 0 {
			t.Errorf("writer %d lost %d packets", id, got.lost)
		}
		if len(got.packets) != len(want[wi]) {
			t.Fatalf("writer %d: %d packets, want %d", id, len(got.packets), len(want[wi]))
		}
		for i, p := range got.packets {
			c, err := canonical(p)
			if err != nil {
				t.Fatalf("writer %d packet %d: %v", id, i, err)
			}
			if !bytes.Equal(c, want[wi][i]) {
				t.Fatalf("writer %d packet %d (%d bytes) differs from the %d bytes written", id, i, len(p), len(want[wi][i]))
			}
		}
	}
	for p := range s.NumPages() {
		if bm := s.PageBitmap(p); bm != 0 {
			t.Errorf("page %d not free after everything was committed: %#x", p, bm)
		}
	}
}

func TestRoundTripConcurrent(t *testing.T) {
	packets := 150
	if *long {
		packets = 2000
	}
	for _, c := range []struct {
		layout PageLayout
		policy CommitPolicy
		mem    backing
	}{{LayoutDiv1, CommitEachChunk, onHeap}, {LayoutDiv4, CommitBatched, inMemfd}, {LayoutDiv14, CommitEachChunk, private}} {
		t.Run(fmt.Sprintf("layout=%d/batched=%v/%s", c.layout, c.policy == CommitBatched, c.mem), func(t *testing.T) {
			runRoundTrip(t, 42, 4, packets, c.layout, c.policy, c.mem)
		})
	}
}

func TestCanonicalDetectsCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := genPacket(rng, 300, 0, nil)
	c, err := canonical(p)
	if err != nil || !bytes.Equal(c, p) {
		t.Fatalf("canonical of canonical input changed it: %v", err)
	}
	q := bytes.Clone(p)
	q[len(q)-1] ^= 0xff
	if c2, _ := canonical(q); bytes.Equal(c2, p) {
		t.Fatal("corruption not visible after canonicalization")
	}
}

var _ = errors.Is
