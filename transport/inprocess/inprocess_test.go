package inprocess

import (
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// oneWriter writes one test packet at Start and commits on Flush.
type oneWriter struct{ w plugins.PacketWriter }

func (o *oneWriter) Start(h plugins.Host) error {
	w, err := h.NewWriter()
	if err != nil {
		return err
	}
	o.w = w
	p := protowire.AppendTag(nil, tracefile.FieldForTesting, protowire.BytesType)
	return w.WritePacket(protowire.AppendBytes(p, []byte("in-process")))
}
func (o *oneWriter) Flush() error           { return o.w.Flush() }
func (o *oneWriter) ClearIncrementalState() {}
func (o *oneWriter) Stop() error            { return o.w.Flush() }

// linkDouble records what the transport hands the session.
type linkDouble struct {
	mu      sync.Mutex
	commits []smb.CommitData
	pid     int32
}

func (l *linkDouble) SetPID(pid int32) { l.pid = pid }
func (l *linkDouble) Deliver(data []byte) {
	var cd smb.CommitData
	if err := cd.Unmarshal(data); err != nil {
		panic(err)
	}
	l.mu.Lock()
	l.commits = append(l.commits, cd)
	l.mu.Unlock()
}
func (l *linkDouble) CommitBuffer() []byte { return nil }

// The Transport contract for a data source in this process: Start needs no
// pid (the session's own is stamped), Flush(id) delivers the committed
// chunk and then a CommitData acknowledging id, into the target buffer it
// was built for; the instance cannot die (nil Exited).
func TestInProcessFlushDeliversThenAcks(t *testing.T) {
	src, mem, err := New(Config{DataSource: &oneWriter{}, SMBSize: 64 << 10, PageSize: 4096, TargetBuffer: 3, Policy: smb.Drop})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	l := &linkDouble{}
	if err := src.Start(l); err != nil {
		t.Fatal(err)
	}
	if err := src.Flush(42, 0); err != nil {
		t.Fatal(err)
	}
	if err := src.Stop(); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	moved, ackAt := 0, -1
	for i, cd := range l.commits {
		for _, m := range cd.ChunksToMove {
			if m.TargetBuffer != 3 {
				t.Errorf("chunk for buffer %d, want 3", m.TargetBuffer)
			}
			if ackAt < 0 {
				moved++
			}
		}
		if cd.FlushRequestID == 42 && ackAt < 0 {
			ackAt = i
		}
	}
	if moved == 0 || ackAt < 0 {
		t.Fatalf("commits %+v: want the written chunk, then flush 42 acknowledged", l.commits)
	}
	if l.pid != 0 || src.Exited() != nil || src.ExitErr() != nil {
		t.Fatalf("pid %d, Exited %v, ExitErr %v: an in-process source has no process of its own", l.pid, src.Exited(), src.ExitErr())
	}
	if src.DataSource() == nil {
		t.Fatal("DataSource is nil")
	}
}
