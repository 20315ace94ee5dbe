package builtin

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protowire"
)

// streamChecker re-states the synthetic stream's contract independently
// of the generator and checks a writer's packets against it, in order.
type streamChecker struct {
	t      testing.TB
	cfg    SyntheticConfig
	writer int

	slice, counter uint64
	packets        int
	cleared        bool // a CLEARED packet was seen
	expectB        bool // the next packet must be descriptor B
	described      map[uint64]bool
	interned       map[uint64]bool
	nextSeq        uint64
	begins         uint64
	open           bool
	clears         int // descriptor A packets seen
	padded         int
}

func newStreamChecker(t testing.TB, cfg SyntheticConfig, writer int) *streamChecker {
	base := cfg.TrackUUIDBase
	if base == 0 {
		base = DefaultSyntheticTrackUUIDBase
	}
	return &streamChecker{t: t, cfg: cfg, writer: writer, slice: base + 2*uint64(writer), counter: base + 2*uint64(writer) + 1}
}

func (c *streamChecker) fail(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("writer %d packet %d (seq %d): %s", c.writer, c.packets, c.nextSeq, fmt.Sprintf(format, args...))
}

func (c *streamChecker) check(p []byte) {
	c.t.Helper()
	checkProducerPacket(c.t, p)
	fs := decode(c.t, p)
	defer func() { c.packets++ }()
	ts, ok := one(c.t, fs, pktTimestamp)
	if !ok {
		c.fail("no timestamp")
	}
	base := c.cfg.TimestampBase
	if base == 0 {
		base = DefaultSyntheticTimestampBase
	}
	if c.cfg.DeterministicTimestamps && ts.v != base+c.nextSeq*1000 {
		c.fail("timestamp %d, want %d", ts.v, base+c.nextSeq*1000)
	}
	flags, _ := one(c.t, fs, pktSequenceFlags)
	first, hasFirst := one(c.t, fs, pktFirstPacketOnSequence)
	if hasFirst != (c.packets == 0) || (hasFirst && first.v != 1) {
		c.fail("first_packet_on_sequence present=%v on packet %d", hasFirst, c.packets)
	}
	if td, ok := one(c.t, fs, pktTrackDescriptor); ok {
		d := decode(c.t, td.b)
		uuid, _ := one(c.t, d, tdUUID)
		name, _ := one(c.t, d, tdName)
		_, isCounter := one(c.t, d, tdCounter)
		if _, ok := one(c.t, fs, pktTrackEvent); ok {
			c.fail("track_descriptor and track_event in one packet")
		}
		switch {
		case !c.expectB:
			if flags.v != seqIncrementalStateCleared || uuid.v != c.slice || isCounter || string(name.b) != fmt.Sprintf("synthetic writer %d", c.writer) {
				c.fail("descriptor A: flags %d uuid %#x counter %v name %q", flags.v, uuid.v, isCounter, name.b)
			}
			c.cleared, c.expectB, c.clears = true, true, c.clears+1
			c.described = map[uint64]bool{c.slice: true}
			c.interned = map[uint64]bool{}
		default:
			if flags.v != seqNeedsIncrementalState || uuid.v != c.counter || !isCounter || string(name.b) != fmt.Sprintf("synthetic counter %d", c.writer) {
				c.fail("descriptor B: flags %d uuid %#x counter %v name %q", flags.v, uuid.v, isCounter, name.b)
			}
			c.expectB = false
			c.described[c.counter] = true
		}
		return
	}
	if c.expectB {
		c.fail("descriptor B missing after A")
	}
	if !c.cleared {
		c.fail("TrackEvent before any CLEARED packet")
	}
	if flags.v != seqNeedsIncrementalState {
		c.fail("sequence_flags %d, want NEEDS_INCREMENTAL_STATE", flags.v)
	}
	if id, ok := one(c.t, fs, pktInternedData); ok {
		for _, en := range all(decode(c.t, id.b), idEventNames) {
			e := decode(c.t, en.b)
			iid, _ := one(c.t, e, enIID)
			name, _ := one(c.t, e, enName)
			if c.interned[iid.v] {
				c.fail("iid %d interned twice since the last CLEARED", iid.v)
			}
			if iid.v < 1 || iid.v > uint64(c.cfg.Names) || string(name.b) != fmt.Sprintf("synthetic_event_%d", iid.v) {
				c.fail("interned iid %d name %q", iid.v, name.b)
			}
			c.interned[iid.v] = true
		}
	}
	te, ok := one(c.t, fs, pktTrackEvent)
	if !ok {
		c.fail("no track_event")
	}
	ev := decode(c.t, te.b)
	typ, _ := one(c.t, ev, teType)
	track, _ := one(c.t, ev, teTrackUUID)
	iid, hasName := one(c.t, ev, teNameIID)
	cv, hasCounter := one(c.t, ev, teCounterValue)
	das := all(ev, teDebugAnnotations)
	if len(das) == 0 {
		c.fail("no debug annotations")
	}
	da := decode(c.t, das[0].b)
	if n, _ := one(c.t, da, daName); string(n.b) != "seq" {
		c.fail("first annotation named %q", n.b)
	}
	if v, _ := one(c.t, da, daIntValue); v.v != c.nextSeq {
		c.fail("seq %d, want %d", v.v, c.nextSeq)
	}
	if s, ok := SyntheticSeq(p); !ok || s != c.nextSeq {
		c.fail("SyntheticSeq = %d, %v", s, ok)
	}
	if len(das) > 2 {
		c.fail("%d debug annotations", len(das))
	}
	if len(das) == 2 {
		pad := decode(c.t, das[1].b)
		if n, _ := one(c.t, pad, daName); string(n.b) != "pad" {
			c.fail("second annotation named %q", n.b)
		}
		if _, ok := one(c.t, pad, daStringValue); !ok {
			c.fail("pad annotation without string_value")
		}
		if len(p) > c.cfg.PacketSize || len(p) < c.cfg.PacketSize-3 {
			c.fail("padded packet of %d bytes, target %d", len(p), c.cfg.PacketSize)
		}
		c.padded++
	}
	if !c.described[track.v] {
		c.fail("track %#x not described since the last CLEARED", track.v)
	}
	seq := c.nextSeq
	c.nextSeq++
	n := uint64(c.cfg.CounterEvery)
	switch {
	case n > 0 && seq%n == n-1:
		if typ.v != teTypeCounter || track.v != c.counter || !hasCounter || cv.v != seq || hasName {
			c.fail("want COUNTER %d on %#x, got type %d track %#x counter %v=%d name %v", seq, c.counter, typ.v, track.v, hasCounter, cv.v, hasName)
		}
	case !c.open:
		want := c.begins%uint64(c.cfg.Names) + 1
		c.begins++
		c.open = true
		if typ.v != teTypeSliceBegin || track.v != c.slice || !hasName || iid.v != want || hasCounter {
			c.fail("want SLICE_BEGIN iid %d, got type %d track %#x name_iid %v=%d", want, typ.v, track.v, hasName, iid.v)
		}
		if !c.interned[iid.v] {
			c.fail("name_iid %d used but not interned since the last CLEARED", iid.v)
		}
	default:
		c.open = false
		if typ.v != teTypeSliceEnd || track.v != c.slice || hasName || hasCounter {
			c.fail("want SLICE_END, got type %d track %#x name %v counter %v", typ.v, track.v, hasName, hasCounter)
		}
	}
}

func TestSyntheticGeneratorStream(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.MaxPackets = 500
	cfg.Names = 7
	cfg.CounterEvery = 5
	cfg.PacketSize = 150
	cfg.DeterministicTimestamps = true
	for w := range 3 {
		g := NewSyntheticGenerator(cfg, w)
		c := newStreamChecker(t, cfg, w)
		var packets int
		for !g.Done() {
			c.check(g.Next(nil))
			packets++
		}
		if packets != 502 || c.nextSeq != 500 || c.clears != 1 {
			t.Fatalf("writer %d: %d packets, %d events, %d clears", w, packets, c.nextSeq, c.clears)
		}
		if c.padded < 450 {
			t.Fatalf("only %d of 500 events padded to 150 bytes", c.padded)
		}
		s, cu := g.TrackUUIDs()
		if s != DefaultSyntheticTrackUUIDBase+2*uint64(w) || cu != s+1 {
			t.Fatalf("uuids %#x %#x", s, cu)
		}
	}
}

// TestSyntheticGeneratorFirstPackets pins the first packets' decoded
// content for the default config.
func TestSyntheticGeneratorFirstPackets(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.DeterministicTimestamps = true
	g := NewSyntheticGenerator(cfg, 0)
	a := decode(t, g.Next(nil))
	want := []field{{num: 8, v: 1_000_000}, {num: 13, v: 1}, {num: 87, v: 1}}
	for i, f := range want {
		if a[i].num != f.num || a[i].v != f.v {
			t.Fatalf("packet A field %d = %d:%d, want %d:%d", i, a[i].num, a[i].v, f.num, f.v)
		}
	}
	b := decode(t, g.Next(nil))
	if b[0].v != 1_000_000 || b[1].num != 13 || b[1].v != 2 || b[2].num != 60 {
		t.Fatalf("packet B %+v", b)
	}
	p0 := g.Next(nil)
	if len(p0) < 196 || len(p0) > 200 {
		t.Fatalf("event 0 is %d bytes, want ~200", len(p0))
	}
	e := decode(t, p0)
	if e[0].v != 1_000_000 || e[1].v != 2 || e[2].num != pktInternedData || e[3].num != pktTrackEvent {
		t.Fatalf("event 0 fields %+v", e[:4])
	}
	en := decode(t, decode(t, e[2].b)[0].b)
	if en[0].v != 1 || string(en[1].b) != "synthetic_event_1" || SyntheticEventName(1) != "synthetic_event_1" {
		t.Fatalf("interned %+v", en)
	}
	p1 := decode(t, g.Next(nil))
	if p1[0].v != 1_001_000 || len(p1) != 3 || p1[2].num != pktTrackEvent {
		t.Fatalf("event 1 (SLICE_END) fields %+v", p1)
	}
	if s, ok := SyntheticSeq(g.Next(nil)); !ok || s != 2 {
		t.Fatalf("event 2 seq %d %v", s, ok)
	}
	if _, ok := SyntheticSeq(g2Descriptor()); ok {
		t.Fatal("SyntheticSeq found a seq in a descriptor packet")
	}
}

func g2Descriptor() []byte {
	return NewSyntheticGenerator(DefaultSyntheticConfig(), 2).Next(nil)
}

func TestSyntheticGeneratorClearIncrementalState(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.Names = 4
	cfg.CounterEvery = 3
	cfg.DeterministicTimestamps = true
	g := NewSyntheticGenerator(cfg, 1)
	c := newStreamChecker(t, cfg, 1)
	for range 2 + 20 {
		c.check(g.Next(nil))
	}
	// All four names are interned by now; after a clear the next packets
	// must be A, B, and the next SLICE_BEGIN must carry interned data again.
	for round := range 3 {
		g.ClearIncrementalState()
		a := g.Next(nil)
		if f, _ := one(t, decode(t, a), pktSequenceFlags); f.v != seqIncrementalStateCleared {
			t.Fatalf("round %d: packet after clear has flags %d", round, f.v)
		}
		c.check(a)
		c.check(g.Next(nil))
		sawInterned := false
		for range 6 {
			p := g.Next(nil)
			if _, ok := one(t, decode(t, p), pktInternedData); ok {
				sawInterned = true
			}
			c.check(p)
		}
		if !sawInterned {
			t.Fatalf("round %d: no name re-interned after the clear", round)
		}
	}
	if c.clears != 4 {
		t.Fatalf("%d descriptor groups, want 4", c.clears)
	}
}

func TestSyntheticPacketSizes(t *testing.T) {
	for _, size := range []int{64, 65, 100, 127, 128, 129, 200, 1000, 1024, 4096, 16383, 16384, 16385, 65536, 1 << 20} {
		// With the real clock the timestamp's varint length depends on
		// the machine's uptime (it grows a byte at 2^42 ns, 73 minutes),
		// which moves packets across varint steps that padding cannot
		// always bridge exactly: the [size-3, size] bound (checked by the
		// stream checker) must hold with both clocks, the share of exact
		// hits is asserted with fixed timestamps only.
		for _, fixed := range []bool{true, false} {
			cfg := DefaultSyntheticConfig()
			cfg.PacketSize = size
			cfg.Names = 50
			cfg.MaxPackets = 300
			cfg.DeterministicTimestamps = fixed
			if size >= 64<<10 {
				cfg.MaxPackets = 20
			}
			g := NewSyntheticGenerator(cfg, 0)
			c := newStreamChecker(t, cfg, 0)
			var exact, events int
			for !g.Done() {
				p := g.Next(nil)
				c.check(p) // padded packets are within [size-3, size]
				if _, ok := SyntheticSeq(p); !ok {
					continue
				}
				events++
				if len(p) > size && size > 100 {
					t.Fatalf("size %d: %d-byte event packet", size, len(p))
				}
				if len(p) == size {
					exact++
				}
			}
			if size >= 100 && c.padded != events {
				t.Fatalf("size %d: %d of %d events padded", size, c.padded, events)
			}
			if fixed && size >= 100 && exact < events*9/10 {
				t.Fatalf("size %d: only %d of %d events exactly on target", size, exact, events)
			}
		}
	}
}

func TestPadLen(t *testing.T) {
	for target := 0; target < 20000; target++ {
		for _, head := range []int{10, 40} {
			for _, ev := range []int{20, 33} {
				p := padLen(target, head, ev)
				if p < 0 {
					if paddedSize(head, ev, 0) <= target {
						t.Fatalf("padLen(%d, %d, %d) = %d but an empty pad fits", target, head, ev, p)
					}
					continue
				}
				got := paddedSize(head, ev, p)
				if got > target || got < target-3 || paddedSize(head, ev, p+1) <= target {
					t.Fatalf("padLen(%d, %d, %d) = %d gives %d bytes", target, head, ev, p, got)
				}
			}
		}
	}
}

func TestSyntheticGeneratorAllocs(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.PacketSize = 1024
	g := NewSyntheticGenerator(cfg, 0)
	buf := make([]byte, 0, 4096)
	for range 100 { // past descriptors and interning
		buf = g.Next(buf[:0])
	}
	if n := testing.AllocsPerRun(1000, func() { buf = g.Next(buf[:0]) }); n != 0 {
		t.Fatalf("Next allocates %v times per packet", n)
	}
}

func BenchmarkSyntheticGenerator(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
		det  bool
	}{{"200B", 200, false}, {"1KiB", 1024, false}, {"1KiB-deterministic", 1024, true}, {"64KiB", 64 << 10, false}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := DefaultSyntheticConfig()
			cfg.PacketSize = c.size
			cfg.DeterministicTimestamps = c.det
			g := NewSyntheticGenerator(cfg, 0)
			buf := make([]byte, 0, c.size+256)
			for range 100 {
				buf = g.Next(buf[:0])
			}
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			for b.Loop() {
				buf = g.Next(buf[:0])
			}
		})
	}
}

// ---- the data source ----

func startSynthetic(t *testing.T, cfg SyntheticConfig, h *fakeHost) *Synthetic {
	t.Helper()
	ds := NewSynthetic(cfg)
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Stop() })
	return ds
}

func TestSyntheticSourceExactStream(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.Writers = 4
	cfg.MaxPackets = 300
	cfg.PacketSize = 100
	cfg.DeterministicTimestamps = true
	h := &fakeHost{}
	ds := startSynthetic(t, cfg, h)
	cfg = ds.Config() // the timestamp base it chose
	total := uint64(cfg.Writers) * uint64(cfg.MaxPackets+2)
	// Done (the plugins.Finite contract) closes once every writer has
	// written and flushed everything.
	var finite interface{ Done() <-chan struct{} } = ds
	select {
	case <-finite.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("Done not closed; stats %+v", ds.Stats())
	}
	if st := ds.Stats(); st.Packets != total {
		t.Fatalf("Done with %d of %d packets written", st.Packets, total)
	}
	for i := range cfg.Writers {
		if _, committed, _, _ := h.writer(i).snapshot(); committed != int(cfg.MaxPackets)+2 {
			t.Fatalf("Done but writer %d has %d packets committed", i, committed)
		}
	}
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	checkWritersSane(t, h)
	for w := range cfg.Writers {
		got, _, _, _ := h.writer(w).snapshot()
		g := NewSyntheticGenerator(cfg, w)
		var want [][]byte
		for !g.Done() {
			want = append(want, g.Next(nil))
		}
		comparePackets(t, fmt.Sprintf("writer %d", w), got, want)
		c := newStreamChecker(t, cfg, w)
		for _, p := range got {
			c.check(p)
		}
	}
	st := ds.Stats()
	var bytesWant uint64
	for w := range cfg.Writers {
		got, _, _, _ := h.writer(w).snapshot()
		for _, p := range got {
			bytesWant += uint64(len(p))
		}
	}
	if st.Bytes != bytesWant || st.WriteErrors != 0 {
		t.Fatalf("stats %+v, want %d bytes", st, bytesWant)
	}
}

// TestSyntheticSourceClearWhileRunning runs on synctest's fake clock: the writer
// (40000 packets/s) and the clears every 5 ms interleave the same way every
// run.
func TestSyntheticSourceClearWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultSyntheticConfig()
		cfg.MaxPackets = 10000
		cfg.Rate = 40000
		cfg.Names = 10
		cfg.DeterministicTimestamps = true
		h := &fakeHost{}
		ds := startSynthetic(t, cfg, h)
		cfg = ds.Config() // the timestamp base it chose
		clears := 0
		for ds.Stats().Packets < 10000 && clears < 20 {
			time.Sleep(5 * time.Millisecond)
			ds.ClearIncrementalState()
			clears++
		}
		testsupport.WaitUntil(t, "generator done", 20*time.Second, func() bool {
			w := h.writer(0)
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.packets) == 0 {
				return false
			}
			seq, ok := SyntheticSeq(w.packets[len(w.packets)-1])
			return ok && seq == 9999
		})
		if err := ds.Stop(); err != nil {
			t.Fatal(err)
		}
		checkWritersSane(t, h)
		got, _, _, _ := h.writer(0).snapshot()
		c := newStreamChecker(t, cfg, 0)
		for _, p := range got {
			c.check(p)
		}
		if c.nextSeq != 10000 {
			t.Fatalf("%d events", c.nextSeq)
		}
		if c.clears < 2 || c.clears > clears+1 {
			t.Fatalf("%d descriptor groups after %d clears", c.clears, clears)
		}
		// Replaying the generator with the clears where they happened gives
		// the same bytes.
		g := NewSyntheticGenerator(cfg, 0)
		for i, p := range got {
			fs := decode(t, p)
			if f, _ := one(t, fs, pktSequenceFlags); f.v == seqIncrementalStateCleared && i > 0 {
				g.ClearIncrementalState()
			}
			if q := g.Next(nil); !bytes.Equal(p, q) {
				t.Fatalf("packet %d differs from the replay", i)
			}
		}
	})
}

// TestSyntheticRateLimit runs rate-limited writers on synctest's fake
// clock: a writer writes its first packet at once and one more every 1/rate
// seconds, so after exactly 300 ms each has written rate*0.3 + 1 packets.
// At 3000/s a packet is due every 333333.3 ns, not a whole number of
// nanoseconds: a writer woken at the truncated instant must not spin there.
func TestSyntheticRateLimit(t *testing.T) {
	const run = 300 * time.Millisecond
	for _, rate := range []int64{100, 3000, 20000} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultSyntheticConfig()
				cfg.Writers = 2
				cfg.Rate = rate
				h := &fakeHost{discard: true}
				ds := startSynthetic(t, cfg, h)
				time.Sleep(run)
				synctest.Wait() // the writers due at this instant write
				if err := ds.Stop(); err != nil {
					t.Fatal(err)
				}
				checkWritersSane(t, h)
				want := int(rate*int64(run)/int64(time.Second)) + 1
				for w := range 2 {
					if n := h.writer(w).count(); n != want {
						t.Errorf("writer %d wrote %d packets at %d/s in %v, want %d", w, n, rate, run, want)
					}
				}
			})
		})
	}
}

// TestSyntheticStopPrompt: Stop ends busy writers (rate 0) and wakes
// sleeping ones (rate 1, on synctest's fake clock: Stop must not let any
// time pass, while a writer left asleep would hold it for up to a second).
func TestSyntheticStopPrompt(t *testing.T) {
	check := func(t *testing.T, rate int64) {
		cfg := DefaultSyntheticConfig()
		cfg.Writers = 4
		cfg.Rate = rate
		h := &fakeHost{discard: true}
		ds := NewSynthetic(cfg)
		if err := ds.Start(h); err != nil {
			t.Fatal(err)
		}
		testsupport.WaitUntil(t, "first packets", 5*time.Second, func() bool { return ds.Stats().Packets >= 4 })
		select {
		case <-ds.Done():
			t.Fatal("Done closed with max_packets 0 before Stop")
		default:
		}
		t0 := time.Now()
		if err := ds.Stop(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); rate > 0 && d != 0 {
			t.Fatalf("Stop let %v pass on the fake clock: it waited for a sleeping writer", d)
		}
		checkWritersSane(t, h)
		select {
		case <-ds.Done():
		default:
			t.Fatal("Done not closed after Stop")
		}
		n := ds.Stats().Packets
		if rate > 0 {
			time.Sleep(2 * time.Second) // fake: every writer would have woken
		}
		if ds.Stats().Packets != n {
			t.Fatal("packets written after Stop returned")
		}
		if err := ds.Stop(); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
	}
	// Busy writers never block, so they cannot run in a synctest bubble;
	// goleak checks that their goroutines are gone.
	t.Run("rate=0", func(t *testing.T) {
		check(t, 0)
		goleak.VerifyNone(t)
	})
	// A synctest bubble fails the test if a goroutine started in it is
	// left behind.
	t.Run("rate=1", func(t *testing.T) { synctest.Test(t, func(t *testing.T) { check(t, 1) }) })
}

// TestSyntheticFlush: Flush commits everything written before it. Writers
// that sleep between packets (rates 1 and 500, on synctest's fake clock)
// are woken: a flush lets no time pass.
func TestSyntheticFlush(t *testing.T) {
	check := func(t *testing.T, rate int64) {
		cfg := DefaultSyntheticConfig()
		cfg.Writers = 3
		cfg.Rate = rate
		h := &fakeHost{discard: true}
		ds := startSynthetic(t, cfg, h)
		testsupport.WaitUntil(t, "packets", 5*time.Second, func() bool { return ds.Stats().Packets >= 3*3 })
		for round := range 5 {
			before := make([]int, cfg.Writers)
			for w := range before {
				before[w] = h.writer(w).count()
			}
			t0 := time.Now()
			if err := ds.Flush(); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(t0); rate > 0 && d != 0 {
				t.Fatalf("round %d: Flush let %v pass on the fake clock: it waited for sleeping writers", round, d)
			}
			for w := range before {
				if _, committed, _, _ := h.writer(w).snapshot(); committed < before[w] {
					t.Fatalf("round %d writer %d: %d packets committed after Flush, %d were written before it", round, w, committed, before[w])
				}
			}
		}
		if err := ds.Stop(); err != nil {
			t.Fatal(err)
		}
		checkWritersSane(t, h)
		for w := range cfg.Writers {
			if _, committed, _, _ := h.writer(w).snapshot(); committed != h.writer(w).count() {
				t.Fatalf("writer %d: %d of %d packets committed after Stop", w, committed, h.writer(w).count())
			}
		}
		if err := ds.Flush(); err != nil {
			t.Fatalf("Flush after Stop: %v", err)
		}
	}
	// Busy writers never block, so they cannot run in a synctest bubble.
	t.Run("rate=0", func(t *testing.T) { check(t, 0) })
	for _, rate := range []int64{1, 500} {
		t.Run(fmt.Sprint("rate=", rate), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { check(t, rate) })
		})
	}
}

func TestSyntheticFlushTimeout(t *testing.T) {
	defer func(d time.Duration) { flushTimeout = d }(flushTimeout)
	flushTimeout = 50 * time.Millisecond
	cfg := DefaultSyntheticConfig()
	cfg.Writers = 2
	h := &fakeHost{blocked: make(chan struct{}), discard: true}
	ds := NewSynthetic(cfg)
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitUntil(t, "writers blocked in WritePacket", 5*time.Second, func() bool {
		return h.numWriters() == 2 && h.writer(0).count() == 1 && h.writer(1).count() == 1
	})
	err := ds.Flush()
	if !errors.Is(err, ErrFlushTimeout) {
		t.Fatalf("Flush of stuck writers: %v", err)
	}
	if st := ds.Stats(); st.FlushTimeouts != 2 {
		t.Fatalf("stats %+v, want 2 flush timeouts", st)
	}
	close(h.blocked) // the "SMB" frees up
	if err := ds.Flush(); err != nil {
		t.Fatalf("Flush after recovery: %v", err)
	}
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	checkWritersSane(t, h)
}

func TestSyntheticWriteErrorsCounted(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.MaxPackets = 100
	h := &fakeHost{failEvery: 3}
	ds := startSynthetic(t, cfg, h)
	testsupport.WaitUntil(t, "all attempts", 10*time.Second, func() bool {
		st := ds.Stats()
		return st.Packets+st.WriteErrors == 102
	})
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	if st := ds.Stats(); st.WriteErrors != 34 || st.Packets != 68 {
		t.Fatalf("stats %+v, want 34 errors and 68 packets", st)
	}
}

func TestSyntheticStartErrors(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.Writers = 3
	h := &fakeHost{failAfter: 2}
	ds := NewSynthetic(cfg)
	if err := ds.Start(h); err == nil {
		t.Fatal("Start succeeded without writers")
	}
	for i := range 2 {
		if _, _, closed, _ := h.writer(i).snapshot(); !closed {
			t.Errorf("writer %d left open after a failed Start", i)
		}
	}
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	ok := NewSynthetic(DefaultSyntheticConfig())
	h2 := &fakeHost{}
	if err := ok.Start(h2); err != nil {
		t.Fatal(err)
	}
	if err := ok.Start(h2); err == nil {
		t.Fatal("second Start succeeded")
	}
	ok.Stop()
}

func TestSyntheticRandomUUIDBase(t *testing.T) {
	a, b := NewSynthetic(DefaultSyntheticConfig()).Config(), NewSynthetic(DefaultSyntheticConfig()).Config()
	if a.TrackUUIDBase == 0 || a.TrackUUIDBase == b.TrackUUIDBase || a.TrackUUIDBase&0xFFFF != 0 {
		t.Fatalf("bases %#x %#x", a.TrackUUIDBase, b.TrackUUIDBase)
	}
	cfg := DefaultSyntheticConfig()
	cfg.DeterministicTimestamps = true
	if NewSynthetic(cfg).Config().TrackUUIDBase != 0 {
		t.Fatal("deterministic config got a random uuid base")
	}
}

func TestSyntheticTimestampsBoottime(t *testing.T) {
	g := NewSyntheticGenerator(DefaultSyntheticConfig(), 0)
	lo := bootNanos()
	var last uint64
	for i := range 1000 {
		ts, _ := one(t, decode(t, g.Next(nil)), pktTimestamp)
		if ts.v < lo || ts.v < last {
			t.Fatalf("packet %d: timestamp %d (boot time at start %d, previous %d)", i, ts.v, lo, last)
		}
		last = ts.v
	}
	if hi := bootNanos(); last > hi {
		t.Fatalf("timestamp %d after boot time %d", last, hi)
	}
}

// Deterministic timestamps start at the boot time of the instance's
// creation, so a trace shows them next to the session's other packets
// (two_buffers.yaml put them 1–16 ms after boot while its metadata said
// 6,345 s). The spacing stays exactly 1 µs per packet.
func TestSyntheticDeterministicTimestampsOnRealClock(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.DeterministicTimestamps = true
	before := bootNanos()
	base := NewSynthetic(cfg).Config().TimestampBase
	after := bootNanos()
	if base > after || base+1e6 <= before {
		t.Fatalf("timestamp base %d outside the boot time of creation [%d, %d]", base, before, after)
	}
	cfg.TimestampBase = base
	g := NewSyntheticGenerator(cfg, 0)
	var ts []uint64
	for range 5 {
		f := decode(t, g.Next(nil))
		v, _ := one(t, f, pktTimestamp)
		ts = append(ts, v.v)
	}
	// A and B carry the first event's timestamp.
	if want := []uint64{base, base, base, base + 1000, base + 2000}; !slices.Equal(ts, want) {
		t.Fatalf("timestamps %v, want %v", ts, want)
	}
}

// A packet its writer dropped (a full SMB under the drop policy) may have
// held interned names or the CLEARED descriptor: without a new CLEARED
// packet trace_processor skips every later packet of the sequence (the
// tour's filtered trace on a loaded machine imported 0 of 7122). The next
// packet after a drop starts the incremental state again.
func TestSyntheticClearsIncrementalStateAfterDrop(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.MaxPackets = 400
	cfg.PacketSize = 100
	cfg.DeterministicTimestamps = true
	h := &fakeHost{dropEvery: 37}
	ds := startSynthetic(t, cfg, h)
	select {
	case <-ds.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("Done not closed; stats %+v", ds.Stats())
	}
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	w := h.writer(0)
	w.mu.Lock()
	packets, dropsAt := slices.Clone(w.packets), slices.Clone(w.dropsAt)
	w.mu.Unlock()
	if len(dropsAt) < 5 {
		t.Fatalf("only %d drops", len(dropsAt))
	}
	for _, i := range dropsAt {
		if i >= len(packets) {
			continue // dropped at the very end
		}
		if f := sequenceFlags(packets[i]); f&seqIncrementalStateCleared == 0 {
			t.Errorf("packet %d, the first after a drop, has sequence_flags %d, want CLEARED", i, f)
		}
	}
}

// sequenceFlags returns a TracePacket's sequence_flags (0 when absent).
func sequenceFlags(p []byte) uint64 {
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return 0
		}
		p = p[n:]
		if num == pktSequenceFlags && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(p)
			return v
		}
		n = protowire.ConsumeFieldValue(num, typ, p)
		if n < 0 {
			return 0
		}
		p = p[n:]
	}
	return 0
}
