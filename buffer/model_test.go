package buffer

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestModelRandomInterleavings drives the buffer the way a set of SMB
// writers and the service would (chunks released in order, committed in
// shuffled batches, scraped while still open, patched after commit, read
// between batches, cloned) and checks every packet against a reference
// model of the guarantees in seeds/buffers-and-dataflow.md:
//
//   - a returned packet is exactly one written packet of the sequence it
//     is reported on (atomic, never a mix, never another sequence's);
//   - per sequence, packets delivered (read, or handed to the overwrite
//     observer) come out in write order, each at most once;
//   - once a sequence has been read from, a packet that skips over
//     undelivered ones carries a loss bit, and so does the first read
//     after packets were overwritten;
//   - if the buffer counted no loss, every packet is read, none flagged;
//   - statistics never decrease.
//
// Each seed runs twice, with and without an overwrite observer (the
// buffer has a separate erase path without one); the reads must match.

var modelTrace = os.Getenv("MODEL_TRACE") != ""

var modelLong = flag.Bool("long", false, "run many more random seeds in TestModelRandomInterleavings")

func TestModelRandomInterleavings(t *testing.T) {
	seeds := 200
	if *modelLong {
		seeds = 50000
	}
	if testing.Short() {
		seeds = 10
	}
	first := 1
	if v, err := strconv.Atoi(os.Getenv("MODEL_SEED")); err == nil {
		first, seeds = v, v // reproduce one seed
	}
	for seed := first; seed <= seeds; seed++ {
		withObs := runModel(t, uint64(seed), true)
		noObs := runModel(t, uint64(seed), false)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
		if !slices.Equal(withObs, noObs) {
			t.Fatalf("seed %d: reads differ with and without an overwrite observer:\n with: %v\n without: %v", seed, withObs, noObs)
		}
	}
}

// mPacket is one packet written by a model writer.
type mPacket struct {
	data []byte
}

// mChunk is one SMB chunk as the writer will finally commit it.
type mChunk struct {
	id      uint32
	payload []byte // final bytes, patch regions zeroed
	nfrags  uint16
	flags   uint8
	capSize int // SMB chunk payload capacity (scrapes copy this much)
	// fragEnds[i] = payload offset just past fragment i.
	fragEnds  []int
	patches   []Patch // restore the zeroed bytes
	committed bool
	patched   bool
	scrapeCut int // bytes visible to the latest scrape
}

// mWriter is one (producer, writer) sequence.
type mWriter struct {
	p, w     uint16
	client   ClientIdentity
	pkts     []mPacket
	nextID   uint32
	rest     []byte // unwritten tail of the packet being written
	restSeq  int
	open     *mChunk
	released []*mChunk
	all      []*mChunk

	// delivery state
	lastRead      int // seqno of the last packet read, -1 if none
	lastDelivered int // last seqno read or observed, -1 if none
	lastObserved  int // last seqno observed, -1 if none
	observedSince bool
	delivered     map[int]string // seqno -> "read" / "observed"
}

type modelRun struct {
	t           testing.TB
	rng         *rand.Rand
	b           *TraceBuffer
	ws          []*mWriter
	byKey       map[uint32]*mWriter
	observed    int
	crossOrder  int // reads older than an already observed packet
	unflagged   int // gaps read without a loss bit
	redelivered int // observed packets read again
	// scrapeAhead: a scrape of a writer's open chunk was copied before its
	// released chunks, the only case where V2 may deliver across the
	// reader and the observer out of order (see deliver).
	scrapeAhead bool
	lossy       bool // the buffer dropped a final commit or overwrote data
	flags       int  // reads with a loss bit
	prev        Stats
	log         []string // reads, for the observer differential
	ctx         string
}

func (m *modelRun) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s: %s", m.ctx, fmt.Sprintf(format, args...))
}

// packetBytes builds packet seqno of writer w: a 12-byte identity header
// followed by bytes derived from it, so any mix or truncation is visible.
func packetBytes(p, w uint16, seqno, n int) []byte {
	out := make([]byte, n)
	binary.LittleEndian.PutUint16(out[0:], p)
	binary.LittleEndian.PutUint16(out[2:], w)
	binary.LittleEndian.PutUint32(out[4:], uint32(seqno))
	binary.LittleEndian.PutUint32(out[8:], uint32(n))
	x := uint32(p)<<16 ^ uint32(w) ^ uint32(seqno)*2654435761
	for i := 12; i < n; i++ {
		x = x*1664525 + 1013904223
		out[i] = byte(x >> 24)
	}
	return out
}

func appendVarint(dst []byte, v int, redundant bool) []byte {
	if redundant {
		return append(dst, byte(v)|0x80, byte(v>>7)|0x80, byte(v>>14)|0x80, byte(v>>21))
	}
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func varintLen(v int) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// newChunkFor writes the next chunk of w: packets (continuing the pending
// one) split at the chunk end, sometimes ending in a fragment that needs a
// patch.
func (m *modelRun) newChunkFor(w *mWriter) *mChunk {
	capSize := 48 + m.rng.IntN(700)
	c := &mChunk{id: w.nextID, capSize: capSize}
	w.nextID++
	target := capSize
	if m.rng.IntN(4) == 0 {
		target = min(capSize, 8+m.rng.IntN(capSize)) // released early (flush)
	}
	for {
		if w.rest == nil {
			n := 12 + m.rng.IntN(200)
			if m.rng.IntN(12) == 0 {
				n = 300 + m.rng.IntN(2500)
			}
			w.pkts = append(w.pkts, mPacket{data: packetBytes(w.p, w.w, len(w.pkts), n)})
			w.restSeq = len(w.pkts) - 1
			w.rest = w.pkts[w.restSeq].data
		}
		redundant := m.rng.IntN(3) == 0
		space := target - len(c.payload)
		hdr := 4
		if !redundant {
			hdr = varintLen(min(len(w.rest), space))
		}
		if space < hdr+1 {
			break
		}
		n := min(len(w.rest), space-hdr)
		first := len(c.fragEnds) == 0
		continues := len(w.rest) < len(w.pkts[w.restSeq].data)
		if first && continues {
			c.flags |= scFrom
		}
		c.payload = appendVarint(c.payload, n, redundant)
		dataOff := len(c.payload)
		c.payload = append(c.payload, w.rest[:n]...)
		c.fragEnds = append(c.fragEnds, len(c.payload))
		c.nfrags++
		if n < len(w.rest) {
			w.rest = w.rest[n:]
			c.flags |= scOn
			if n >= 4 && m.rng.IntN(3) == 0 {
				off := dataOff + m.rng.IntN(n-3)
				var p Patch
				p.Offset = uint32(off)
				copy(p.Data[:], c.payload[off:off+4])
				clear(c.payload[off : off+4])
				c.patches = append(c.patches, p)
				c.flags |= scPatch
			}
			break
		}
		w.rest = nil
		if m.rng.IntN(6) == 0 {
			break
		}
	}
	w.all = append(w.all, c)
	return c
}

func (m *modelRun) copyChunk(w *mWriter, c *mChunk, complete bool, nfrags uint16, flags uint8, payload []byte, benign bool) {
	before := m.b.Stats().ChunksDiscarded
	m.b.CopyChunkUntrusted(w.p, w.client, w.w, c.id, nfrags, flags, complete, payload)
	if modelTrace {
		fmt.Printf("copy %d/%d c=%d complete=%v nfrags=%d/%d flags=%#x len=%d/%d benign=%v abi=%d disc=%d\n", w.p, w.w, c.id, complete, nfrags, c.nfrags, flags, len(payload), len(c.payload), benign, m.b.Stats().AbiViolations, m.b.Stats().ChunksDiscarded)
	}
	m.checkStats()
	if !benign && m.b.Stats().ChunksDiscarded != before {
		m.lossy = true
	}
}

// scrape copies a prefix of the open chunk as the service's SMB scraping
// would: the last declared fragment may be half written and the rest of
// the chunk is zero. Scraping walks the whole SMB, so the writer's released
// chunks are committed in the same batch (before or after the scrape).
func (m *modelRun) scrape(w *mWriter) {
	c := w.open
	if c == nil || len(c.fragEnds) == 0 {
		return
	}
	scrapeFirst := m.rng.IntN(2) == 0
	if scrapeFirst && len(w.released) > 0 {
		m.scrapeAhead = true
	}
	if !scrapeFirst {
		m.commitReleased(w)
	}
	// The SMB only grows: a later scrape never sees less than an earlier
	// one. The last fragment is never complete in a scrape.
	end := c.fragEnds[len(c.fragEnds)-1]
	cut := c.scrapeCut + m.rng.IntN(end-c.scrapeCut)
	c.scrapeCut = cut
	k := 0 // complete fragments kept
	for k < len(c.fragEnds) && c.fragEnds[k] <= cut {
		k++
	}
	payload := make([]byte, c.capSize)
	copy(payload, c.payload[:cut])
	m.copyChunk(w, c, false, uint16(k+1), c.flags&scFrom, payload, true)
	if scrapeFirst {
		m.commitReleased(w)
	}
}

func (m *modelRun) commitReleased(w *mWriter) {
	for _, c := range w.released {
		m.commitOne(w, c)
	}
	w.released = nil
}

func (m *modelRun) release(w *mWriter) {
	if w.open != nil {
		w.released = append(w.released, w.open)
	}
	w.open = m.newChunkFor(w)
}

// commitBatch commits the released chunks of some writers, shuffled.
func (m *modelRun) commitBatch(all bool) {
	var batch []struct {
		w *mWriter
		c *mChunk
	}
	for _, w := range m.ws {
		if !all && m.rng.IntN(2) == 0 {
			continue
		}
		for _, c := range w.released {
			batch = append(batch, struct {
				w *mWriter
				c *mChunk
			}{w, c})
		}
		w.released = nil
	}
	if len(batch) > 1 && m.rng.IntN(2) == 0 {
		i := m.rng.IntN(len(batch) - 1)
		batch[i], batch[i+1] = batch[i+1], batch[i]
	}
	for _, e := range batch {
		m.commitOne(e.w, e.c)
	}
}

func (m *modelRun) commitOne(w *mWriter, c *mChunk) {
	payload := c.payload
	if m.rng.IntN(3) == 0 { // trailing SMB padding
		payload = append(slices.Clip(payload), make([]byte, c.capSize-len(payload))...)
	}
	m.copyChunk(w, c, true, c.nfrags, c.flags, payload, false)
	c.committed = true
	if m.rng.IntN(12) == 0 {
		m.copyChunk(w, c, true, c.nfrags, c.flags, c.payload, true)
	}
}

func (m *modelRun) patchSome(all bool) {
	for _, w := range m.ws {
		for _, c := range w.all {
			if !c.committed || c.patched || len(c.patches) == 0 || (!all && m.rng.IntN(2) == 0) {
				continue
			}
			if m.rng.IntN(3) == 0 {
				// The same patch twice: first with more pending.
				m.b.TryPatchChunkContents(w.p, w.w, c.id, c.patches, true)
				m.checkStats()
			}
			m.b.TryPatchChunkContents(w.p, w.w, c.id, c.patches, false)
			m.checkStats()
			c.patched = true
		}
	}
}

// identify checks that data is exactly one packet of w and returns its seqno.
func (m *modelRun) identify(w *mWriter, data []byte, what string) int {
	m.t.Helper()
	if len(data) < 12 {
		m.fail("%s on (%d,%d): %d-byte packet is no written packet", what, w.p, w.w, len(data))
	}
	p := binary.LittleEndian.Uint16(data[0:])
	wr := binary.LittleEndian.Uint16(data[2:])
	seq := int(binary.LittleEndian.Uint32(data[4:]))
	if p != w.p || wr != w.w {
		m.fail("%s on (%d,%d) carries a packet of (%d,%d)", what, w.p, w.w, p, wr)
	}
	if seq >= len(w.pkts) || string(w.pkts[seq].data) != string(data) {
		m.fail("%s on (%d,%d): packet %d (%d bytes) does not match what was written (mixed, truncated or unpatched)", what, w.p, w.w, seq, len(data))
	}
	return seq
}

func (m *modelRun) deliver(w *mWriter, seq int, how string) {
	m.t.Helper()
	if prev, ok := w.delivered[seq]; ok {
		if prev == "observed" && how == "read" && m.scrapeAhead {
			// See crossOrder: the re-admission record of a scraped
			// chunk was replaced when an older chunk of the sequence
			// was consumed after it, so its final commit is read in
			// full again.
			m.redelivered++
			w.lastRead = seq
			return
		}
		m.fail("(%d,%d) packet %d %s, already %s", w.p, w.w, seq, how, prev)
	}
	last := w.lastRead
	if how == "observed" {
		last = w.lastObserved
	}
	if seq <= last {
		m.fail("(%d,%d) packet %d %s after packet %d was %s: out of order", w.p, w.w, seq, how, last, how)
	}
	if seq <= w.lastDelivered {
		if !m.scrapeAhead {
			m.fail("(%d,%d) packet %d %s after packet %d was delivered", w.p, w.w, seq, how, w.lastDelivered)
		}
		// The reader and the observer each see their packets in order,
		// but V2 can store a chunk behind the sequence's last consumed
		// one when that chunk's own make-room pass erased later chunks
		// of its sequence (stale check before the overwrite, §4 steps
		// 8 and 11), so the two streams can interleave out of order.
		m.crossOrder++
	}
	w.delivered[seq] = how
	w.lastDelivered = max(w.lastDelivered, seq)
	if how == "observed" {
		w.lastObserved = seq
	}
}

func (m *modelRun) observe(seq SequenceProperties, packet [][]byte) {
	w := m.byKey[seqKey(seq.ProducerID, seq.WriterID)]
	if w == nil {
		m.fail("observer got a packet of unknown sequence (%d,%d)", seq.ProducerID, seq.WriterID)
	}
	var data []byte
	for _, s := range packet {
		data = append(data, s...)
	}
	n := m.identify(w, data, "observed packet")
	if modelTrace {
		fmt.Printf("observed %d/%d#%d\n", w.p, w.w, n)
	}
	m.deliver(w, n, "observed")
	w.observedSince = true
	m.observed++
}

func (m *modelRun) readPass(limit int) {
	if modelTrace {
		fmt.Printf("BeginRead limit=%d\n", limit)
	}
	m.b.BeginRead()
	for i := 0; limit < 0 || i < limit; i++ {
		var p Packet
		if !m.b.ReadNextTracePacket(&p) {
			break
		}
		m.checkStats()
		w := m.byKey[seqKey(p.Seq.ProducerID, p.Seq.WriterID)]
		if w == nil {
			m.fail("read a packet of unknown sequence (%d,%d)", p.Seq.ProducerID, p.Seq.WriterID)
		}
		if p.Seq.Client != w.client {
			m.fail("(%d,%d) read with client %+v, want %+v", w.p, w.w, p.Seq.Client, w.client)
		}
		data := p.AppendTo(nil)
		if p.Size() != len(data) {
			m.fail("Packet.Size %d != len(AppendTo) %d", p.Size(), len(data))
		}
		n := m.identify(w, data, "read packet")
		if p.PreviousPacketDropped != 0 {
			m.flags++
			if p.PreviousPacketDropped&LossPresent == 0 {
				m.fail("(%d,%d) packet %d: dropped %#x without LossPresent", w.p, w.w, n, p.PreviousPacketDropped)
			}
		}
		gap := (w.lastRead >= 0 && n != w.lastRead+1) || w.observedSince
		if gap && p.PreviousPacketDropped == 0 && m.scrapeAhead {
			// V2 checks ChunkID continuity only when a sequence reader
			// is constructed (§7); a reader that walks from chunks
			// committed behind an early scrape onto that scrape skips
			// a discarded or overwritten chunk between them silently.
			m.unflagged++
		} else if gap && p.PreviousPacketDropped == 0 {
			m.fail("(%d,%d) packet %d read after packet %d (observed since: %v) without a loss bit",
				w.p, w.w, n, w.lastRead, w.observedSince)
		}
		m.deliver(w, n, "read")
		w.lastRead = n
		w.observedSince = false
		m.log = append(m.log, fmt.Sprintf("%d/%d#%d:%d", w.p, w.w, n, p.PreviousPacketDropped))
		if modelTrace {
			fmt.Printf("read %s\n", m.log[len(m.log)-1])
		}
	}
}

// cloneCheck reads a clone: same packet rules, and nothing the source has
// already delivered may come back.
func (m *modelRun) cloneCheck() {
	c := m.b.CloneReadOnly()
	last := map[*mWriter]int{}
	c.BeginRead()
	for {
		var p Packet
		if !c.ReadNextTracePacket(&p) {
			break
		}
		w := m.byKey[seqKey(p.Seq.ProducerID, p.Seq.WriterID)]
		if w == nil {
			m.fail("clone read a packet of unknown sequence (%d,%d)", p.Seq.ProducerID, p.Seq.WriterID)
		}
		n := m.identify(w, p.AppendTo(nil), "clone packet")
		if how, ok := w.delivered[n]; ok && !(how == "observed" && m.scrapeAhead) {
			m.fail("clone returned (%d,%d) packet %d the source already %s", w.p, w.w, n, w.delivered[n])
		}
		if l, ok := last[w]; ok && n <= l {
			m.fail("clone (%d,%d) packet %d after %d", w.p, w.w, n, l)
		}
		last[w] = n
	}
}

func (m *modelRun) checkStats() {
	m.t.Helper()
	cur := m.b.Stats()
	a, b := reflect.ValueOf(m.prev), reflect.ValueOf(cur)
	for i := 0; i < a.NumField(); i++ {
		if b.Field(i).Uint() < a.Field(i).Uint() {
			m.fail("Stats.%s decreased from %d to %d", a.Type().Field(i).Name, a.Field(i).Uint(), b.Field(i).Uint())
		}
	}
	m.prev = cur
}

func runModel(t *testing.T, seed uint64, withObserver bool) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	sizes := []int{4096, 8192, 16384, 32768}
	size := sizes[rng.IntN(len(sizes))]
	policy := RingBuffer
	if rng.IntN(5) == 0 {
		policy = Discard
	}
	b, err := New(size, policy)
	if err != nil {
		t.Fatal(err)
	}
	m := &modelRun{t: t, rng: rng, b: b, byKey: map[uint32]*mWriter{},
		ctx: fmt.Sprintf("seed %d (size %d, %v, observer %v)", seed, size, policy, withObserver)}
	nw := 1 + rng.IntN(5)
	for i := 0; i < nw; i++ {
		w := &mWriter{p: uint16(1 + rng.IntN(3)), w: uint16(1 + i), lastRead: -1, lastDelivered: -1, lastObserved: -1,
			delivered: map[int]string{}}
		w.client = ClientIdentity{UID: int32(1000 + w.p), PID: int32(100 + w.p)}
		if rng.IntN(4) == 0 {
			w.nextID = 0xFFFFFFFF - uint32(rng.IntN(5))
		}
		m.ws = append(m.ws, w)
		m.byKey[seqKey(w.p, w.w)] = w
		w.open = m.newChunkFor(w)
	}
	if withObserver {
		b.SetOverwriteObserver(m.observe)
	}
	steps := 150 + rng.IntN(250)
	for i := 0; i < steps; i++ {
		w := m.ws[rng.IntN(len(m.ws))]
		switch r := rng.IntN(100); {
		case r < 35:
			m.release(w)
		case r < 45:
			m.scrape(w)
		case r < 65:
			m.commitBatch(false)
			if rng.IntN(2) == 0 {
				m.patchSome(false)
			}
		case r < 72:
			m.patchSome(false)
		case r < 90:
			m.readPass(-1)
		case r < 95:
			m.readPass(1 + rng.IntN(3))
		default:
			m.cloneCheck()
		}
	}
	// Flush everything and drain: the open chunks are released without
	// starting new ones.
	for _, w := range m.ws {
		w.released = append(w.released, w.open)
		w.open = nil
	}
	m.commitBatch(true)
	m.patchSome(true)
	m.readPass(-1)
	m.readPass(-1)

	st := b.Stats()
	if st.AbiViolations != 0 {
		m.fail("%d ABI violations from a well-formed writer", st.AbiViolations)
	}
	if !withObserver && m.observed != 0 {
		m.fail("observer called while unset")
	}
	if st.ChunksOverwritten > 0 || m.observed > 0 {
		m.lossy = true
	}
	if m.crossOrder > 0 || m.redelivered > 0 || m.unflagged > 0 {
		t.Logf("%s: V2 quirks after an early scrape: %d packets read after a later packet of their sequence was overwritten, %d overwritten packets read again, %d gaps without a loss bit",
			m.ctx, m.crossOrder, m.redelivered, m.unflagged)
	}
	if modelTrace {
		fmt.Printf("SUMMARY seed=%d obs=%v lossy=%v observed=%d reads=%d flagged=%d stats=%+v\n", seed, withObserver, m.lossy, m.observed, len(m.log), m.flags, st)
	}
	if !m.lossy {
		// Nothing lost by the buffer's own account: every packet whose
		// chunks all got committed must have been read, none flagged.
		if m.flags != 0 {
			var flagged []string
			for _, l := range m.log {
				if !strings.HasSuffix(l, ":0") {
					flagged = append(flagged, l)
				}
			}
			m.fail("lossless run has %d reads with a loss bit: %v (stats %+v)", m.flags, flagged, st)
		}
		for _, w := range m.ws {
			complete := len(w.pkts)
			if w.rest != nil {
				complete = w.restSeq // the last packet is still being written
			}
			for n := 0; n < complete; n++ {
				if w.delivered[n] != "read" {
					m.fail("lossless run: (%d,%d) packet %d of %d never read (stats %+v)", w.p, w.w, n, complete, st)
				}
			}
		}
	}
	return m.log
}
