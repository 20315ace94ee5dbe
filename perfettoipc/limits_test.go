package perfettoipc

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// fakeUIDs makes h see every connection it is handed next as coming from
// the uid stored in uid (SO_PEERCRED of a socketpair is this process).
func fakeUIDs(h *Host, uid *atomic.Uint32) {
	h.cred = func(*net.UnixConn) (Peer, error) {
		return Peer{UID: uid.Load(), PID: int32(os.Getpid())}, nil
	}
}

// closedByHost reports whether the host closed c's connection (EOF
// within the deadline).
func closedByHost(c *testClient, within time.Duration) bool {
	_, err := c.tryRecv(within)
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// One local user holding 300 idle connections to the producer socket
// takes at most MaxConnsPerUID of the 256 slots: the rest of its
// connections are refused at once, and another uid still connects,
// initializes and is served.
func TestHost300IdleConnectionsOfOneUIDLeaveRoomForAnother(t *testing.T) {
	h := NewHost(NewProducerPort(newRecordingBackend()))
	h.InitTimeout = -1 // idle for the whole test: only the counts bound them
	defer h.Close()
	var uid atomic.Uint32
	fakeUIDs(h, &uid)
	uid.Store(1000)
	var hog []*testClient
	for range 300 {
		hog = append(hog, pair(t, h))
	}
	total, of := h.Open(1000)
	if of != 64 || total != 64 {
		t.Fatalf("uid 1000 holds %d connections (%d in all), want the per-uid default 64", of, total)
	}
	if r := h.Refused(); r != 300-64 {
		t.Fatalf("%d connections refused, want %d", r, 300-64)
	}
	// The refused ones were closed at once; the first 64 stay open.
	if !closedByHost(hog[299], 10*time.Second) {
		t.Fatal("the 300th connection of uid 1000 was not closed")
	}
	if closedByHost(hog[0], 10*time.Millisecond) {
		t.Fatal("uid 1000's first connection was closed")
	}

	uid.Store(2000)
	other := pair(t, h)
	resp, _ := initProducer(t, other, false, -1)
	if resp == nil {
		t.Fatal("uid 2000 could not initialize")
	}
	if _, of := h.Open(2000); of != 1 {
		t.Fatalf("uid 2000 holds %d connections, want 1", of)
	}
	// Closing the hog's connections frees its slots.
	for _, c := range hog {
		c.close()
	}
	if !testsupport.WaitFor(10*time.Second, func() bool { _, of := h.Open(1000); return of == 0 }) {
		t.Fatal("uid 1000's slots were not freed after its connections closed")
	}
}

// A producer connection that never calls InitializeConnection is closed
// InitTimeout after it connected; one that initialized stays.
func TestHostClosesConnectionsThatNeverInitialize(t *testing.T) {
	h := NewHost(NewProducerPort(newRecordingBackend()))
	h.InitTimeout = 100 * time.Millisecond
	defer h.Close()
	good := pair(t, h)
	initProducer(t, good, false, -1)
	boundOnly := pair(t, h)
	boundOnly.bind("ProducerPort")
	silent := pair(t, h)
	if !closedByHost(silent, 10*time.Second) {
		t.Fatal("a connection that sent nothing was not closed")
	}
	if !closedByHost(boundOnly, 10*time.Second) {
		t.Fatal("a connection that bound ProducerPort but never initialized was not closed")
	}
	// Both were closed after their timers fired; good's timer fired
	// first (it connected first) and found it initialized.
	good.invoke(1, mSync, &SyncRequest{}, false, -1)
	if f := good.recv(); f.GetMsgInvokeMethodReply() == nil {
		t.Fatalf("the initialized producer's Sync got %v", f)
	}
}

// The limits count per uid across the host, and a uid's connections past
// its limit are refused while other uids are served.
func TestHostPerUIDLimitConfigurable(t *testing.T) {
	h := echoHost()
	h.MaxConns, h.MaxConnsPerUID = 4, 2
	h.InitTimeout = -1
	defer h.Close()
	var uid atomic.Uint32
	fakeUIDs(h, &uid)
	served := func(c *testClient) bool { return !closedByHost(c, 20*time.Millisecond) }
	uid.Store(1)
	a, b, c := pair(t, h), pair(t, h), pair(t, h)
	if !served(a) || !served(b) || served(c) {
		t.Fatal("uid 1: want its first two connections served, the third refused")
	}
	uid.Store(2)
	d, e := pair(t, h), pair(t, h)
	if !served(d) || !served(e) {
		t.Fatal("uid 2: want two connections served")
	}
	uid.Store(3)
	if f := pair(t, h); served(f) {
		t.Fatal("a fifth connection was served past MaxConns 4")
	}
}
