//go:build smbsched

package smb

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/buffer"
)

// The scrape/commit/read protocol under explored schedules. Writers (real
// TraceWriters over a real Arbiter) and the service (a real Reader feeding
// a real TraceBuffer, doing what pipeline does: take commits, scrape,
// read back) run as goroutines of which exactly one runs at a time; at
// every yieldAt point (between the atomic accesses the protocol orders:
// sched.go) a seeded random choice decides who runs next. That is the
// only source of nondeterminism, so a seed is a schedule, and a failing
// one replays with -interleave.seed.
//
// Under the stall policy nothing may be lost: every writer's packets come
// back once each, in order, none flagged previous_packet_dropped, and the
// buffer counts no discarded chunk, no ABI violation and no loss.

var (
	interleaveSeed  = flag.Uint64("interleave.seed", 0, "run only this schedule seed of TestInterleaveScrapeCommitRead")
	interleaveCount = flag.Int("interleave.schedules", 400, "schedules TestInterleaveScrapeCommitRead explores")
)

// coop runs goroutines one at a time, switching at yield points.
type coop struct {
	rng *rand.Rand
	gs  []*coopG
	cur *coopG
	// switchPct is the chance (in %) that a yield point switches.
	switchPct int
}

type coopG struct {
	name    string
	run     chan struct{}
	done    bool
	service bool // never takes the arbiter's locks
	locked  bool // parked at a point reached with the arbiter's lock held
}

func (c *coop) spawn(name string, service bool, wg *sync.WaitGroup, body func()) {
	g := &coopG{name: name, run: make(chan struct{}), service: service}
	c.gs = append(c.gs, g)
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-g.run
		body()
		g.done = true
		g.locked = false
		c.next(g, true)
	}()
}

// start runs the first goroutine.
func (c *coop) start() {
	c.cur = c.gs[0]
	c.cur.run <- struct{}{}
}

// yield is the hook: the current goroutine reached s.
func (c *coop) yield(s site) {
	me := c.cur
	me.locked = siteLocked(s)
	if s == siteStalled {
		// A stalled writer sleeps before it retries: let the service
		// run (free chunks) first, so schedules do not wait out sleeps.
		for _, g := range c.gs {
			if g.service && !g.done {
				c.cur = g
				g.run <- struct{}{}
				<-me.run
				return
			}
		}
	}
	c.next(me, false)
}

// next picks who runs after me and, unless it is me, hands over and (when
// me is not finished) waits to be picked again.
func (c *coop) next(me *coopG, finished bool) {
	if !finished && c.rng.IntN(100) >= c.switchPct {
		return
	}
	// A goroutine parked with the arbiter's lock held would block every
	// other writer: while there is one, only it and the service may run.
	var holder *coopG
	for _, g := range c.gs {
		if !g.done && g.locked {
			holder = g
		}
	}
	var cands []*coopG
	for _, g := range c.gs {
		if g.done || (holder != nil && g != holder && !g.service) {
			continue
		}
		cands = append(cands, g)
	}
	if len(cands) == 0 {
		return // everyone finished
	}
	g := cands[c.rng.IntN(len(cands))]
	if g == me {
		return
	}
	c.cur = g
	g.run <- struct{}{}
	if !finished {
		<-me.run
	}
}

// interleaveService is the service side of one schedule.
type interleaveService struct {
	t       *testing.T
	reader  *Reader
	buf     *buffer.TraceBuffer
	mu      sync.Mutex // guards queue (filled by writers' OnCommit)
	queue   [][]byte
	cd      CommitData
	padded  []byte
	patches []buffer.Patch
	next    map[uint16]uint64 // per writer id: next packet index expected
	failure string
	// origin and events trace what the service did, for a replayed seed.
	origin string
	events []string
}

func (s *interleaveService) note(format string, args ...any) {
	if *interleaveSeed != 0 {
		s.events = append(s.events, fmt.Sprintf(format, args...))
	}
}

func (s *interleaveService) onChunk(v *ChunkView) {
	s.note("%s: writer %d chunk %d at %d/%d: %d fragments, flags %#x, complete %v",
		s.origin, v.WriterID, v.ChunkID, v.Page, v.Index, v.Fragments, v.Flags, v.Complete)
	payload, n := v.Payload, v.Fragments
	if v.Aborted {
		payload, n = v.WithSentinel, n+1
	}
	if !v.Complete {
		// As pipeline's copyChunk: reserve the whole chunk for a later,
		// bigger commit of it.
		s.padded = append(s.padded[:0], payload...)
		s.padded = append(s.padded, make([]byte, max(v.PayloadCapacity-len(payload), 0))...)
		payload = s.padded
	}
	s.buf.CopyChunkUntrusted(1, buffer.ClientIdentity{}, v.WriterID, v.ChunkID, n, v.Flags, v.Complete, payload)
}

func (s *interleaveService) onPatch(p *ChunkToPatch) {
	s.patches = s.patches[:0]
	for _, pt := range p.Patches {
		s.patches = append(s.patches, buffer.Patch{Offset: pt.Offset, Data: pt.Data})
	}
	s.buf.TryPatchChunkContents(1, p.WriterID, p.ChunkID, s.patches, p.HasMorePatches)
}

// commitOne takes the oldest queued commit; false if there is none.
func (s *interleaveService) commitOne() bool {
	s.mu.Lock()
	if len(s.queue) == 0 {
		s.mu.Unlock()
		return false
	}
	data := s.queue[0]
	s.queue = s.queue[1:]
	s.mu.Unlock()
	if err := s.cd.Unmarshal(data); err != nil {
		s.fail("commit: %v", err)
		return true
	}
	s.origin = "commit"
	s.reader.ReadCommit(&s.cd, s.onChunk, s.onPatch)
	return true
}

func (s *interleaveService) scrape() {
	s.origin = "scrape"
	s.note("scrape")
	s.reader.Scrape(s.onChunk)
}

func (s *interleaveService) fail(format string, args ...any) {
	if s.failure == "" {
		s.failure = fmt.Sprintf(format, args...)
	}
}

// readPass reads the buffer back and checks each writer's packets.
func (s *interleaveService) readPass() {
	s.buf.BeginRead()
	var p buffer.Packet
	s.note("read pass")
	for s.buf.ReadNextTracePacket(&p) {
		pkt := p.AppendTo(nil)
		w := p.Seq.WriterID
		s.note("  writer %d packet %d", w, func() uint64 { i, _ := packetIndex(pkt); return i }())
		idx, ok := packetIndex(pkt)
		if !ok {
			s.fail("writer %d: packet %d unreadable (%d bytes, previous_packet_dropped %#x)", w, s.next[w], len(pkt), p.PreviousPacketDropped)
			continue
		}
		if p.PreviousPacketDropped != 0 {
			s.fail("writer %d: packet %d flagged previous_packet_dropped %#x", w, idx, p.PreviousPacketDropped)
		}
		if idx != s.next[w] {
			s.fail("writer %d: packet %d read, want %d (a gap of %d)", w, idx, s.next[w], int64(idx)-int64(s.next[w]))
		}
		s.next[w] = idx + 1
	}
}

// interleavePacket is packet idx of a writer: field 2 = idx, then a
// nested message (field 3) holding pad bytes (field 1) so that a packet
// crossing chunks leaves its size to be patched.
func interleavePacket(idx uint64, pad int) (outer []byte, inner []byte) {
	outer = protowire.AppendTag(nil, 2, protowire.VarintType)
	outer = protowire.AppendVarint(outer, idx)
	inner = protowire.AppendTag(nil, 1, protowire.BytesType)
	inner = protowire.AppendBytes(inner, bytes.Repeat([]byte{byte(idx)}, pad))
	return outer, inner
}

// packetIndex checks a read packet and returns its index.
func packetIndex(pkt []byte) (uint64, bool) {
	var idx uint64
	seen := false
	for len(pkt) > 0 {
		num, typ, n := protowire.ConsumeTag(pkt)
		if n < 0 {
			return 0, false
		}
		pkt = pkt[n:]
		switch {
		case num == 2 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(pkt)
			if m < 0 {
				return 0, false
			}
			idx, seen, pkt = v, true, pkt[m:]
		case num == 3 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(pkt)
			if m < 0 {
				return 0, false
			}
			_, typ, k := protowire.ConsumeTag(v)
			if k < 0 || typ != protowire.BytesType {
				return 0, false
			}
			pad, l := protowire.ConsumeBytes(v[k:])
			if l < 0 || k+l != len(v) || !seen || bytes.Count(pad, []byte{byte(idx)}) != len(pad) {
				return 0, false
			}
			pkt = pkt[m:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, pkt)
			if n < 0 {
				return 0, false
			}
			pkt = pkt[n:]
		}
	}
	return idx, seen
}

// runSchedule runs one schedule and returns what went wrong ("" if
// nothing did).
func runSchedule(t *testing.T, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x5c4ed))
	c := &coop{rng: rng, switchPct: 20 + rng.IntN(60)}
	schedHook = c.yield
	defer func() { schedHook = nil }()

	buf, err := buffer.New(4<<20, buffer.RingBuffer)
	if err != nil {
		t.Fatal(err)
	}
	nw := 1 + rng.IntN(3)
	// A stalled writer holds its chunk while it waits for the next one:
	// the SMB needs a chunk more than there are writers.
	shm, err := NewHeapSMB((nw+1+rng.IntN(5))*4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	svc := &interleaveService{t: t, reader: NewReader(shm), buf: buf, next: map[uint16]uint64{}}
	arb, err := NewArbiter(shm, ArbiterOptions{Commit: CommitPolicy(rng.IntN(2)), OnCommit: func(cd *CommitData) {
		b := cd.AppendMarshal(nil)
		svc.mu.Lock()
		svc.queue = append(svc.queue, b)
		svc.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	packets := 30 + rng.IntN(60)
	writers := make([]*TraceWriter, nw)
	for i := range writers {
		if writers[i], err = arb.NewTraceWriter(1, Stall); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	running := nw
	var runMu sync.Mutex
	for i, w := range writers {
		wrng := rand.New(rand.NewPCG(seed, uint64(i)))
		c.spawn(fmt.Sprintf("writer %d", w.ID()), false, &wg, func() {
			defer func() {
				runMu.Lock()
				running--
				runMu.Unlock()
			}()
			for idx := range uint64(packets) {
				pad := wrng.IntN(300)
				if wrng.IntN(8) == 0 {
					pad = 1000 + wrng.IntN(6000) // crosses chunks
				}
				outer, inner := interleavePacket(idx, pad)
				var err error
				if wrng.IntN(2) == 0 {
					err = w.WritePacket(protowire.AppendBytes(protowire.AppendTag(outer, 3, protowire.BytesType), inner))
				} else {
					tp := w.NewTracePacket()
					tp.AppendRaw(outer)
					nested := tp.BeginNested(3)
					nested.AppendRaw(inner)
					nested.End()
					err = tp.Finish()
				}
				if err == nil && wrng.IntN(20) == 0 {
					err = w.Flush() // a data source's Flush
				}
				if err != nil {
					svc.fail("writer %d packet %d: %v", w.ID(), idx, err)
					return
				}
			}
			if err := w.Flush(); err != nil {
				svc.fail("writer %d: final flush: %v", w.ID(), err)
			}
		})
	}
	c.spawn("service", true, &wg, func() {
	serve:
		for {
			runMu.Lock()
			live := running
			runMu.Unlock()
			switch r := rng.IntN(10); {
			case r < 6:
				svc.commitOne()
			case r < 8:
				svc.scrape()
			default:
				svc.readPass()
			}
			if live == 0 {
				break serve
			}
			c.yield(numSites) // the service's own turn ends
		}
		// Everything written: take every commit, scrape what is left
		// (nothing should be) and read the rest back.
		for svc.commitOne() {
		}
		svc.scrape()
		svc.readPass()
	})
	c.start()
	wg.Wait()

	for _, e := range svc.events {
		t.Log(e)
	}
	if svc.failure != "" {
		return svc.failure
	}
	for _, w := range writers {
		if got := svc.next[w.ID()]; got != uint64(packets) {
			return fmt.Sprintf("writer %d: %d of %d packets read back", w.ID(), got, packets)
		}
	}
	st := buf.Stats()
	if st.ChunksDiscarded != 0 || st.AbiViolations != 0 || st.ChunksOverwritten != 0 || st.PatchesFailed != 0 {
		return fmt.Sprintf("buffer counted chunks_discarded %d, abi_violations %d, chunks_overwritten %d, patches_failed %d",
			st.ChunksDiscarded, st.AbiViolations, st.ChunksOverwritten, st.PatchesFailed)
	}
	if r := svc.reader.Stats().TotalRejected(); r != 0 {
		return fmt.Sprintf("reader rejected %d chunks: %+v", r, svc.reader.Stats().Rejected)
	}
	return ""
}

func TestInterleaveScrapeCommitRead(t *testing.T) {
	seeds := make([]uint64, 0, *interleaveCount)
	if *interleaveSeed != 0 {
		seeds = append(seeds, *interleaveSeed)
	} else {
		for i := range *interleaveCount {
			seeds = append(seeds, uint64(i+1))
		}
	}
	failed := 0
	for _, seed := range seeds {
		if msg := runSchedule(t, seed); msg != "" {
			failed++
			if failed <= 5 {
				t.Errorf("schedule %d: %s (replay: go test -tags smbsched ./smb -run TestInterleaveScrapeCommitRead -interleave.seed %d)", seed, msg, seed)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d schedules lost or damaged packets", failed, len(seeds))
	}
}
