package perfettoipc

import (
	"errors"
	"io"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// initProducer binds, initialises (with fd if >= 0) and opens
// GetAsyncCommand; it returns the InitializeConnection reply and the
// GetAsyncCommand request id.
func initProducer(t *testing.T, c *testClient, provided bool, fd int) (*InitializeConnectionResponse, uint64) {
	t.Helper()
	c.bind("ProducerPort")
	rid := c.invoke(1, mInitializeConnection, &InitializeConnectionRequest{ProducerName: proto.String("p"),
		SharedMemoryPageSizeHintBytes: proto.Uint32(4096), ProducerProvidedShmem: proto.Bool(provided)}, false, fd)
	gac := c.invoke(1, mGetAsyncCommand, &GetAsyncCommandRequest{}, false, -1)
	f := c.recv()
	var r InitializeConnectionResponse
	if f.GetRequestId() != rid || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &r) != nil {
		t.Fatalf("InitializeConnection reply %v", f)
	}
	return &r, gac
}

// Each producer gets its own SMB: the descriptors two producers receive
// are different files, and neither is the other's.
func TestEachProducerOwnSMB(t *testing.T) {
	b := newRecordingBackend()
	h := NewHost(NewProducerPort(b))
	defer h.Close()
	var inodes []uint64
	for range 2 {
		c := pair(t, h)
		initProducer(t, c, false, -1)
		var p *Producer
		select {
		case p = <-b.producers:
		case <-time.After(10 * time.Second):
			t.Fatal("no producer")
		}
		if err := p.SetupDataSource(1, &DataSourceConfig{Name: proto.String("x")}); err != nil {
			t.Fatal(err)
		}
		p.StartDataSource(1, &DataSourceConfig{Name: proto.String("x")})
		c.recv() // setup_tracing
		fd := c.takeFD()
		if fd < 0 {
			t.Fatal("no SMB descriptor")
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		inodes = append(inodes, st.Ino)
	}
	if inodes[0] == inodes[1] {
		t.Fatalf("two producers share SMB inode %d", inodes[0])
	}
}

// A producer-supplied SMB that could be truncated under the service (no
// shrink seal) is refused: the service uses its own SMB.
func TestUnsealedProducerSMBRefused(t *testing.T) {
	h := NewHost(NewProducerPort(newRecordingBackend()))
	defer h.Close()
	c := pair(t, h)
	fd, err := unix.MemfdCreate("perfetto_shmem", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Ftruncate(fd, 64<<10)
	r, _ := initProducer(t, c, true, fd)
	unix.Close(fd)
	if r.GetUsingShmemProvidedByProducer() {
		t.Fatal("an unsealed producer SMB was accepted")
	}
	// A sealed one is used, and confirmed by an empty setup_tracing.
	c2 := pair(t, h)
	sealed := testsupport.SealedMemfd(t, 64<<10)
	r, gac := initProducer(t, c2, true, sealed)
	unix.Close(sealed)
	if !r.GetUsingShmemProvidedByProducer() {
		t.Fatal("a sealed producer SMB was refused")
	}
	f := c2.recv()
	var cmd GetAsyncCommandResponse
	if f.GetRequestId() != gac || proto.Unmarshal(f.GetMsgInvokeMethodReply().GetReplyProto(), &cmd) != nil || cmd.GetSetupTracing() == nil || len(c2.fds) != 0 {
		t.Fatalf("after a producer SMB: %v (%d fds)", f, len(c2.fds))
	}
}

// Calls before InitializeConnection, and a second InitializeConnection,
// fail.
func TestProducerCallsNeedInitialization(t *testing.T) {
	h := NewHost(NewProducerPort(newRecordingBackend()))
	defer h.Close()
	c := pair(t, h)
	c.bind("ProducerPort")
	rid := c.invoke(1, mRegisterDataSource, &RegisterDataSourceRequest{DataSourceDescriptor: &DataSourceDescriptor{Name: proto.String("x")}}, false, -1)
	if f := c.recv(); f.GetRequestId() != rid || f.GetMsgInvokeMethodReply().Success != nil {
		t.Fatalf("RegisterDataSource before InitializeConnection: %v", f)
	}
	initProducer(t, c, false, -1)
	rid = c.invoke(1, mInitializeConnection, &InitializeConnectionRequest{}, false, -1)
	if f := c.recv(); f.GetRequestId() != rid || f.GetMsgInvokeMethodReply().Success != nil {
		t.Fatalf("second InitializeConnection: %v", f)
	}
}

// A producer that never opens GetAsyncCommand is disconnected once the
// commands held for it reach the bound, instead of growing them forever.
func TestProducerWithoutCommandStreamBounded(t *testing.T) {
	b := newRecordingBackend()
	h := NewHost(NewProducerPort(b))
	defer h.Close()
	c := pair(t, h)
	c.bind("ProducerPort")
	rid := c.invoke(1, mInitializeConnection, &InitializeConnectionRequest{ProducerName: proto.String("mute")}, false, -1)
	if f := c.recv(); f.GetRequestId() != rid {
		t.Fatalf("%v", f)
	}
	p := <-b.producers
	for i := range maxPendingCmds + 1 {
		p.Flush([]uint64{1}, uint64(i+1), 0)
	}
	if f, err := c.tryRecv(10 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("not disconnected: %v %v", f, err)
	}
	p.mu.Lock()
	n := len(p.pending)
	p.mu.Unlock()
	if n > maxPendingCmds {
		t.Fatalf("%d commands held", n)
	}
}
