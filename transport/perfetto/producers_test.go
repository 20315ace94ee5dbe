package perfetto

import (
	"slices"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/smb"
	"google.golang.org/protobuf/encoding/protowire"
)

// Routing a producer's commits to the instances owning their buffers
// allocates nothing in steady state (the hot path of every Perfetto
// producer): single-buffer and mixed commits alike, a mixed commit's
// parts re-encoded and a single instance's commit copied as the producer
// encoded it, into recycled buffers; and every chunk reaches exactly its
// instance.
func TestPerfettoCommitRoutingAllocs(t *testing.T) {
	r := NewProducers()
	pp := &ipc.Producer{} // the connection's identity only
	c := &perfettoConn{r: r, pp: pp, gone: make(chan struct{}),
		routes: map[uint32][]*perfettoSide{}, instances: map[uint64]*perfettoSide{}}
	r.conns = append(r.conns, c)
	commits := make(chan commitMsg, 8)
	side := func(wire uint32, inst uint64) *perfettoSide {
		p := &linkDouble{commits: commits, free: make(chan []byte, 16)}
		ps := &perfettoSide{conn: c, link: p, wire: wire, instance: inst, live: true}
		c.instances[inst] = ps
		c.routes[wire] = append(c.routes[wire], ps)
		return ps
	}
	a, b := side(1, 1), side(2, 2)
	var mixed, single smb.CommitData
	mixed.ChunksToMove = []smb.ChunkToMove{{Page: 0, Chunk: 0, TargetBuffer: 1}, {Page: 1, Chunk: 0, TargetBuffer: 2}, {Page: 2, Chunk: 1, TargetBuffer: 1}}
	mixed.ChunksToPatch = []smb.ChunkToPatch{{TargetBuffer: 2, WriterID: 3, ChunkID: 7, Patches: []smb.Patch{{Offset: 8, Data: [4]byte{1, 2, 3, 4}}}}}
	single.ChunksToMove = []smb.ChunkToMove{{Page: 3, Chunk: 0, TargetBuffer: 2}}
	mixedB, singleB := mixed.AppendMarshal(nil), single.AppendMarshal(nil)
	got := map[pipeline.Link][]smb.CommitData{}
	drain := func(keep bool) {
		for {
			select {
			case m := <-commits:
				if keep {
					var cd smb.CommitData
					if err := cd.Unmarshal(m.data); err != nil {
						t.Fatal(err)
					}
					got[m.p] = append(got[m.p], cd)
				}
				m.p.recycle(m.data)
			default:
				return
			}
		}
	}
	r.Commit(pp, mixedB, nil)
	drain(true)
	if len(got[a.link]) != 1 || len(got[a.link][0].ChunksToMove) != 2 || len(got[a.link][0].ChunksToPatch) != 0 ||
		len(got[b.link]) != 1 || len(got[b.link][0].ChunksToMove) != 1 || got[b.link][0].ChunksToMove[0].Page != 1 || len(got[b.link][0].ChunksToPatch) != 1 {
		t.Fatalf("routed %+v", got)
	}
	// A commit for one instance only reaches it as the producer's bytes;
	// one acknowledging a flush is re-encoded (the acknowledgement
	// follows the data, from the connection's flush bookkeeping).
	withFlush := single
	withFlush.FlushRequestID = 9
	for _, tc := range []struct {
		data []byte
		same bool
	}{
		// An unknown field, which only the producer's own bytes keep.
		{protowire.AppendVarint(protowire.AppendTag(slices.Clip(singleB), 15, protowire.VarintType), 1), true},
		{withFlush.AppendMarshal(nil), false},
	} {
		r.Commit(pp, tc.data, nil)
		select {
		case m := <-commits:
			if m.p != b.link {
				t.Fatalf("commit for buffer 2 reached %v", m.p)
			}
			if slices.Equal(m.data, tc.data) != tc.same {
				t.Errorf("delivered %x for commit %x: want the producer's bytes %v", m.data, tc.data, tc.same)
			}
			var cd smb.CommitData
			if err := cd.Unmarshal(m.data); err != nil || len(cd.ChunksToMove) != 1 || cd.ChunksToMove[0].Page != 3 || cd.FlushRequestID != 0 {
				t.Errorf("delivered %+v, %v", cd, err)
			}
			m.p.recycle(m.data)
		default:
			t.Fatalf("commit %x delivered nothing", tc.data)
		}
	}
	if n := testing.AllocsPerRun(200, func() {
		r.Commit(pp, mixedB, nil)
		r.Commit(pp, singleB, nil)
		drain(false)
	}); n != 0 {
		t.Fatalf("%.1f allocations per routed pair of commits", n)
	}
}

// A session's instances on one producer share one flush command; an
// instance that asks for the flush only after the producer acknowledged
// it joins the acknowledged one instead of sending the command again;
// the acknowledged flush is forgotten once every instance joined.
func TestPerfettoFlushLateJoiner(t *testing.T) {
	r := NewProducers()
	c := &perfettoConn{r: r, pp: &ipc.Producer{}, gone: make(chan struct{}),
		routes: map[uint32][]*perfettoSide{}, instances: map[uint64]*perfettoSide{}}
	commits := make(chan commitMsg, 8)
	sess := &perfettoSession{id: 1, buffers: []uint32{1}}
	var sides []*perfettoSide
	for i := range 3 {
		p := &linkDouble{commits: commits, free: make(chan []byte, 4)}
		ps := &perfettoSide{conn: c, link: p, wire: 1, sess: sess, instance: uint64(i + 1), live: true, desc: &ipc.DataSourceDescriptor{}}
		c.instances[ps.instance] = ps
		sides = append(sides, ps)
	}
	pending := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.flushes)
	}
	first := make(chan error, 1)
	go func() { first <- sides[0].Flush(7, 0) }()
	if !testsupport.WaitFor(10*time.Second, func() bool { return pending() == 1 }) {
		t.Fatal("the first instance's flush never went out")
	}
	c.mu.Lock()
	ids, req := c.flushes[0].ids, c.flushes[0].req
	c.mu.Unlock()
	if !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Fatalf("flush lists instances %v, want all three", ids)
	}
	c.acked(req)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for _, ps := range sides[1:] {
		if err := ps.Flush(7, 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.nextFlush.Load(); n != 1 {
		t.Fatalf("%d flush commands for one flush of the session", n)
	}
	if n := pending(); n != 0 {
		t.Fatalf("%d flushes kept after every instance joined", n)
	}
	// Each instance handed its service the acknowledgement of flush 7.
	for range sides {
		m := <-commits
		var cd smb.CommitData
		if err := cd.Unmarshal(m.data); err != nil || cd.FlushRequestID != 7 {
			t.Fatalf("ack %+v (%v)", cd, err)
		}
	}
}

// commitMsg is one commit a linkDouble was handed, and by whom.
type commitMsg struct {
	p    *linkDouble
	data []byte
}

// linkDouble stands for the session's side of an instance's Link: the
// commits delivered go to a channel, their buffers are recycled through
// free as the session's producer recycles them.
type linkDouble struct {
	commits chan<- commitMsg
	free    chan []byte
}

func (l *linkDouble) SetPID(int32)        {}
func (l *linkDouble) Deliver(data []byte) { l.commits <- commitMsg{p: l, data: data} }
func (l *linkDouble) CommitBuffer() []byte {
	select {
	case b := <-l.free:
		return b[:0]
	default:
		return nil
	}
}

func (l *linkDouble) recycle(b []byte) {
	select {
	case l.free <- b:
	default:
	}
}
