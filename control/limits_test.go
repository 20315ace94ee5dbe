package control

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/peerlimit"
)

// served dials the socket and reports whether the server keeps the
// connection: gRPC's server speaks first (its SETTINGS frame), a refused
// connection reads EOF at once.
func served(t *testing.T, path string) (net.Conn, bool) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 64))
	return c, n > 0 && err == nil
}

// closedWithin reports whether the server closes c (EOF) before the
// deadline, reading (and dropping) what it sends first.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}
}

// One uid's connections beyond its limit are refused while another uid
// is served; the whole socket is bounded too.
func TestControlSocketBoundedPerUID(t *testing.T) {
	var uid atomic.Uint32
	srv, err := ListenWith(shortDir(t), "", &fakeSession{}, ListenOptions{
		Limits: peerlimit.Limits{Max: 5, PerUID: 3}, IdleTimeout: time.Minute,
		lookup: func(*net.UnixConn) (peerlimit.Cred, error) {
			return peerlimit.Cred{UID: uid.Load(), PID: int32(os.Getpid())}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	uid.Store(1000)
	for i := range 3 {
		if _, ok := served(t, srv.Path()); !ok {
			t.Fatalf("uid 1000's connection %d refused within its limit of 3", i+1)
		}
	}
	for range 20 { // an idle hog keeps trying
		if _, ok := served(t, srv.Path()); ok {
			t.Fatal("uid 1000 got a fourth connection past its limit of 3")
		}
	}
	uid.Store(2000)
	if _, ok := served(t, srv.Path()); !ok {
		t.Fatal("uid 2000 was refused while uid 1000 held its limit")
	}
	if _, ok := served(t, srv.Path()); !ok {
		t.Fatal("uid 2000's second connection refused (5 in all allowed)")
	}
	uid.Store(3000)
	if _, ok := served(t, srv.Path()); ok {
		t.Fatal("a sixth connection was served past the socket's limit of 5")
	}
	// A real client still gets through once a slot is free.
	srv2, err := Listen(shortDir(t), "", &fakeSession{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Close()
	cl, err := Dial(Endpoint{Path: srv2.Path()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Info(ctx(t)); err != nil {
		t.Fatal(err)
	}
}

// A connection that never speaks HTTP/2 is closed after the idle timeout
// (a connection that completed it is closed after as long without a call:
// gRPC's MaxConnectionIdle).
func TestControlSocketClosesIdleConnections(t *testing.T) {
	srv, err := ListenWith(shortDir(t), "", &fakeSession{}, ListenOptions{IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, ok := served(t, srv.Path())
	if !ok {
		t.Fatal("connection refused")
	}
	if !closedWithin(c, 10*time.Second) {
		t.Fatal("a connection that never completed its handshake was not closed")
	}
}
