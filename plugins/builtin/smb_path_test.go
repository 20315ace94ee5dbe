package builtin

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
)

// smbHarness is a plugins.Host backed by a real heap SMB, arbiter and
// TraceWriters, with a service goroutine that reads every CommitData with
// smb.Reader and keeps a copy of each chunk (patches applied), so tests
// can reassemble what each writer wrote exactly as the service would.
type smbHarness struct {
	t       *testing.T
	s       *smb.SMB
	arb     *smb.Arbiter
	commits chan []byte
	done    chan struct{}

	mu      sync.Mutex
	ids     []uint16 // writer ids in NewWriter order
	chunks  map[uint16]map[uint32]*storedChunk
	badPtch int
	stats   smb.ReaderStats
}

type storedChunk struct {
	payload   []byte
	fragments int
	flags     uint8
}

func newSMBHarness(t *testing.T, size, pageSize int) *smbHarness {
	s, err := smb.NewHeapSMB(size, pageSize)
	if err != nil {
		t.Fatal(err)
	}
	h := &smbHarness{t: t, s: s, commits: make(chan []byte, 4096), done: make(chan struct{}),
		chunks: map[uint16]map[uint32]*storedChunk{}}
	h.arb, err = smb.NewArbiter(s, smb.ArbiterOptions{
		// The arbiter reuses the CommitData after OnCommit: keep an encoding.
		OnCommit:     func(cd *smb.CommitData) { h.commits <- cd.AppendMarshal(nil) },
		StallTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	go h.serve()
	return h
}

func (h *smbHarness) serve() {
	defer close(h.done)
	r := smb.NewReader(h.s)
	var cd smb.CommitData
	for rec := range h.commits {
		if err := cd.Unmarshal(rec); err != nil {
			h.t.Errorf("commit: %v", err)
			continue
		}
		r.ReadCommit(&cd, h.addChunk, h.applyPatch)
	}
	h.mu.Lock()
	h.stats = *r.Stats()
	h.mu.Unlock()
}

func (h *smbHarness) addChunk(v *smb.ChunkView) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.chunks[v.WriterID]
	if m == nil {
		m = map[uint32]*storedChunk{}
		h.chunks[v.WriterID] = m
	}
	if _, dup := m[v.ChunkID]; dup {
		h.t.Errorf("writer %d chunk %d committed twice", v.WriterID, v.ChunkID)
	}
	m[v.ChunkID] = &storedChunk{payload: bytes.Clone(v.Payload), fragments: int(v.Fragments), flags: v.Flags}
}

func (h *smbHarness) applyPatch(p *smb.ChunkToPatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.chunks[p.WriterID][p.ChunkID]
	if c == nil {
		h.badPtch += len(p.Patches)
		return
	}
	for _, pp := range p.Patches {
		if int(pp.Offset)+4 > len(c.payload) {
			h.badPtch++
			continue
		}
		copy(c.payload[pp.Offset:], pp.Data[:])
	}
	if !p.HasMorePatches {
		c.flags &^= smb.FlagChunkNeedsPatching
	}
}

// NewWriter implements plugins.Host.
func (h *smbHarness) NewWriter() (plugins.PacketWriter, error) {
	w, err := h.arb.NewTraceWriter(1, smb.Stall)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.ids = append(h.ids, w.ID())
	h.mu.Unlock()
	return w, nil
}

// finish delivers the last commits, stops the service goroutine and checks
// that the reader refused nothing.
func (h *smbHarness) finish() {
	h.t.Helper()
	h.arb.FlushPendingCommits()
	close(h.commits)
	<-h.done
	if n := h.stats.TotalRejected(); n != 0 || h.stats.PatchesDiscarded != 0 || h.badPtch != 0 {
		h.t.Errorf("reader rejected %d chunks, discarded %d patches, %d patches did not apply", n, h.stats.PatchesDiscarded, h.badPtch)
	}
	for p := range h.s.NumPages() {
		if bm := h.s.PageBitmap(p); bm != 0 {
			h.t.Errorf("page %d not free after everything was committed: %#x", p, bm)
		}
	}
}

// packets reassembles the packets of the i-th writer created: fragments
// are joined across consecutive chunks by the continuation flags; any gap,
// orphan or unpatched chunk fails the test.
func (h *smbHarness) packets(i int) [][]byte {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.ids[i]
	m := h.chunks[id]
	cids := make([]uint32, 0, len(m))
	for cid := range m {
		cids = append(cids, cid)
	}
	slices.Sort(cids)
	var out [][]byte
	var pending []byte
	open := false
	for k, cid := range cids {
		if uint32(k) != cid {
			h.t.Fatalf("writer %d: chunk ids %v are not 0..n-1", id, cids)
		}
		c := m[cid]
		if c.flags&smb.FlagChunkNeedsPatching != 0 {
			h.t.Fatalf("writer %d chunk %d still needs patching", id, cid)
		}
		end, n, aborted, why := smb.ParseFragments(c.payload, c.fragments)
		if why >= 0 || aborted || n != c.fragments {
			h.t.Fatalf("writer %d chunk %d: fragments: %v (aborted %v, %d of %d)", id, cid, why, aborted, n, c.fragments)
		}
		b := c.payload[:end]
		for f := 0; f < n; f++ {
			size, l := protowire.ConsumeVarint(b)
			frag := b[l : l+int(size)]
			b = b[l+int(size):]
			continues := f == 0 && c.flags&smb.FlagFirstPacketContinuesFromPrevChunk != 0
			last := f == n-1 && c.flags&smb.FlagLastPacketContinuesOnNextChunk != 0
			if continues != open {
				h.t.Fatalf("writer %d chunk %d fragment %d: continuation %v, open packet %v", id, cid, f, continues, open)
			}
			pending = append(pending, frag...)
			open = last
			if last {
				continue
			}
			if len(pending) > 0 || continues { // zero-length fragments are padding
				out = append(out, pending)
			}
			pending = nil
		}
	}
	if open {
		h.t.Fatalf("writer %d: last packet never finished", id)
	}
	return out
}

// firstPacketPrefix is what smb.TraceWriter puts in front of a writer's
// first packet: first_packet_on_sequence = true.
var firstPacketPrefix = []byte{0xb8, 0x05, 0x01}

func comparePackets(t *testing.T, who string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d packets, want %d", who, len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: packet %d differs:\n got %x\nwant %x", who, i, got[i], want[i])
		}
	}
}

func TestSyntheticThroughSMB(t *testing.T) {
	h := newSMBHarness(t, 256<<10, 4096)
	cfg := DefaultSyntheticConfig()
	cfg.Writers = 3
	cfg.MaxPackets = 400
	cfg.PacketSize = 1500 // crosses 4 KiB chunk boundaries: fragments and patches
	cfg.Names = 20
	cfg.DeterministicTimestamps = true
	ds := NewSynthetic(cfg)
	cfg = ds.Config() // the timestamp base it chose
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	total := uint64(cfg.Writers) * uint64(cfg.MaxPackets+2)
	testsupport.WaitUntil(t, "all packets written", 20*time.Second, func() bool { return ds.Stats().Packets == total })
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	h.finish()
	if st := ds.Stats(); st.WriteErrors != 0 || st.Packets != total {
		t.Fatalf("stats %+v, want %d packets and no errors", st, total)
	}
	for w := range cfg.Writers {
		g := NewSyntheticGenerator(cfg, w)
		var want [][]byte
		for !g.Done() {
			want = append(want, g.Next(nil))
		}
		want[0] = append(slices.Clone(firstPacketPrefix), want[0]...)
		got := h.packets(w)
		for _, p := range got {
			checkProducerPacket(t, p)
		}
		comparePackets(t, fmt.Sprintf("writer %d", w), got, want)
	}
}

func TestProcessStatsThroughSMB(t *testing.T) {
	root := buildFakeProc(t)
	h := newSMBHarness(t, 64<<10, 4096)
	ds := NewProcessStats(DefaultProcessStatsConfig())
	ds.procRoot = root
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	if err := ds.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	h.finish()
	got := h.packets(0)
	if len(got) != 1 {
		t.Fatalf("%d packets, want 1", len(got))
	}
	p, ok := bytes.CutPrefix(got[0], firstPacketPrefix)
	if !ok {
		t.Fatalf("first packet lacks the writer's first_packet_on_sequence prefix: %x", got[0])
	}
	checkProducerPacket(t, p)
	procs, threads := decodeTrees(t, [][]byte{p}, true)
	checkFakeTree(t, procs, threads, true)
}

func TestSysStatsThroughSMB(t *testing.T) {
	root := buildFakeSysProc(t)
	h := newSMBHarness(t, 64<<10, 4096)
	ds := NewSysStats(SysStatsConfig{MeminfoPeriodMs: 10, VmstatPeriodMs: 10, StatPeriodMs: 10})
	ds.procRoot = root
	if err := ds.Start(h); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitUntil(t, "three samples", 10*time.Second, func() bool { return ds.Stats().Packets >= 3 })
	if err := ds.Stop(); err != nil {
		t.Fatal(err)
	}
	h.finish()
	got := h.packets(0)
	if n := ds.Stats().Packets; uint64(len(got)) != n || n < 3 {
		t.Fatalf("%d packets reassembled, %d written", len(got), n)
	}
	got[0] = bytes.TrimPrefix(got[0], firstPacketPrefix)
	for i, p := range got {
		checkProducerPacket(t, p)
		s := decodeSysStats(t, p, i == 0)
		checkFakeSysStats(t, s, true, true, true)
	}
}
