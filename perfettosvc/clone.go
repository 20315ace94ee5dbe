package perfettosvc

import (
	"encoding/binary"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/sinks"
)

// CloneSession for Perfetto consumers (reference/service.md §11): the
// running session is snapshotted with the flight recorder's clone
// (pipeline.Service.Snapshot: flush, read-only copy of every buffer, a complete
// trace of its own read back on its own goroutine) into an in-memory
// sink, and that trace is served to the cloning consumer as a finished,
// read-only session its ReadBuffers drains.

// cloneWait bounds a clone: its flush, copy and readback.
const cloneWait = 60 * time.Second

// cloneSink opens the in-memory destination of snapshot n
// (pipeline.Options.SnapshotSink of a consumer's session).
func (cs *consumerSession) cloneSink(n int, _ string) (sinks.Sink, error) {
	m := &memSink{limit: 2*cs.cloneLimit + 1<<20} // the buffers plus the snapshot's own packets
	m.charge(cs.pc)
	cs.cloneMu.Lock()
	cs.clones[n] = m
	cs.cloneMu.Unlock()
	return m, nil
}

func (cs *consumerSession) takeClone(n int) *memSink {
	cs.cloneMu.Lock()
	defer cs.cloneMu.Unlock()
	m := cs.clones[n]
	delete(cs.clones, n)
	return m
}

// CloneSession implements perfettoipc.ConsumerBackend: as traced, only
// the session's own uid (or root) may clone it; the session is named by
// its id or its unique_session_name.
func (pc *PerfettoConsumers) CloneSession(peer perfettoipc.Peer, r *perfettoipc.CloneSessionRequest) (perfettoipc.ConsumerSession, *perfettoipc.CloneSessionResponse) {
	fail := func(format string, args ...any) (perfettoipc.ConsumerSession, *perfettoipc.CloneSessionResponse) {
		return nil, &perfettoipc.CloneSessionResponse{Success: proto.Bool(false), Error: proto.String(fmt.Sprintf(format, args...))}
	}
	var cs *consumerSession
	pc.mu.Lock()
	switch sel := r.Selector.(type) {
	case *perfettoipc.CloneSessionRequest_SessionId:
		cs = pc.sessions[sel.SessionId]
	case *perfettoipc.CloneSessionRequest_UniqueSessionName:
		for _, s := range pc.sessions {
			if s.uniqueName != "" && s.uniqueName == sel.UniqueSessionName {
				cs = s
				break
			}
		}
	}
	pc.mu.Unlock()
	switch {
	case r.Selector == nil:
		return fail("CloneSession: neither session_id nor unique_session_name")
	case cs == nil:
		return fail("CloneSession: no such running session")
	case !cs.mayClone(peer):
		// Not "permission denied": a session of another uid is not listed.
		return fail("CloneSession: no such running session")
	case !cs.isStarted():
		return fail("CloneSession: %v", errNotStarted)
	}
	trigger := r.GetCloneTriggerName()
	if trigger == "" {
		trigger = "clone"
	}
	var res pipeline.SnapshotResult
	t := time.NewTimer(cloneWait)
	defer t.Stop()
	select {
	case res = <-cs.svc.Snapshot(pipeline.SnapshotRequest{Trigger: trigger, Producer: r.GetCloneTriggerProducerName()}):
	case <-t.C:
		// The snapshot goes on; its memory is dropped with the session.
		return fail("CloneSession: the clone was not ready within %v", cloneWait)
	}
	mem := cs.takeClone(res.N)
	if mem != nil {
		mem.end() // the snapshot is written: settled once the consumer read it
	}
	if res.Err != nil {
		if mem != nil {
			mem.take(-1) // unread: its heap is given back
		}
		return fail("CloneSession: %v", res.Err)
	}
	if mem == nil {
		return fail("CloneSession: the clone has no in-memory copy")
	}
	if st := mem.Stats(); st.PacketsDroppedQueue > 0 {
		mem.take(-1)
		return fail("CloneSession: the clone did not fit in memory (%d packets dropped)", st.PacketsDroppedQueue)
	}
	u := cs.svc.SnapshotUUID(res.N)
	return &clonedSession{mem: mem, done: closedChan}, &perfettoipc.CloneSessionResponse{
		Success: proto.Bool(true), WasWriteIntoFile: proto.Bool(cs.file),
		UuidMsb: proto.Int64(int64(binary.BigEndian.Uint64(u[:8]))), UuidLsb: proto.Int64(int64(binary.BigEndian.Uint64(u[8:]))),
	}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// clonedSession is a clone being read by the consumer that made it: it
// has ended (traced's CLONED_READ_ONLY), only ReadBuffers and FreeBuffers
// do anything.
type clonedSession struct {
	mem  *memSink
	done chan struct{}
}

var errCloneReadOnly = fmt.Errorf("a cloned session is read-only")

func (c *clonedSession) Done() <-chan struct{}             { return c.done }
func (c *clonedSession) Err() error                        { return nil }
func (c *clonedSession) Disable()                          {}
func (c *clonedSession) Flush(time.Duration, uint64) error { return errCloneReadOnly }
func (c *clonedSession) ReadPackets(maxBytes int) [][]byte { return c.mem.take(maxBytes) }
func (c *clonedSession) Free()                             { c.mem.take(-1) }
func (c *clonedSession) TraceStats() ([]byte, error)       { return nil, errCloneReadOnly }
func (c *clonedSession) WritesIntoFile() bool              { return false }
func (c *clonedSession) Start() error                      { return errCloneReadOnly }
func (c *clonedSession) ChangeTraceConfig([]byte) error    { return errCloneReadOnly }
func (c *clonedSession) Observe(uint32, func(*perfettoipc.ObservableEvents)) (func(), error) {
	return nil, errCloneReadOnly
}
