package perfettoipc

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawPair is a connected stream socket pair: the service's end as the
// host holds it (a non-blocking *net.UnixConn) and the peer's raw
// descriptor.
func rawPair(t *testing.T) (*net.UnixConn, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "service end")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); unix.Close(fds[1]) })
	return c.(*net.UnixConn), fds[1]
}

func newTestReceiver(t *testing.T, uc *net.UnixConn) *rawReceiver {
	t.Helper()
	rc, err := uc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return newRawReceiver(rc, make([]byte, 64), make([]byte, unix.CmsgSpace(maxFDsPerRead*4)))
}

// A read waits for the peer (the socket is non-blocking: the wait is the
// poller's), then returns its bytes and the descriptor it passed; the
// peer's close is io.EOF.
func TestRawReceiverWaitsThenReads(t *testing.T) {
	uc, peer := rawPair(t)
	r := newTestReceiver(t, uc)
	type result struct {
		n, oobn int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		n, oobn, err := r.read()
		done <- result{n, oobn, err}
	}()
	passed, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer passed.Close()
	if err := unix.Sendmsg(peer, []byte("hello"), unix.UnixRights(int(passed.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || string(r.buf[:res.n]) != "hello" {
		t.Fatalf("read %q, %v; want hello", r.buf[:res.n], res.err)
	}
	msgs, err := unix.ParseSocketControlMessage(r.oob[:res.oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %v, %v; want the one passed", msgs, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights %v, %v; want one descriptor", fds, err)
	}
	flags, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0)
	unix.Close(fds[0])
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("received descriptor flags %#x, %v; want close-on-exec", flags, err)
	}
	unix.Close(peer)
	if _, _, err := r.read(); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
}

// Closing the connection ends a read that is waiting, as the host's
// Close relies on.
func TestRawReceiverCloseEndsWait(t *testing.T) {
	uc, _ := rawPair(t)
	r := newTestReceiver(t, uc)
	done := make(chan error, 1)
	go func() {
		_, _, err := r.read()
		done <- err
	}()
	uc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting read outlived the connection's close by 10 s")
	}
}

// Reading allocates nothing: it is on every CommitData's path.
func TestRawReceiverNoAlloc(t *testing.T) {
	uc, peer := rawPair(t)
	r := newTestReceiver(t, uc)
	msg := []byte("commit")
	if n := testing.AllocsPerRun(100, func() {
		if _, err := unix.Write(peer, msg); err != nil {
			t.Fatal(err)
		}
		if n, _, err := r.read(); err != nil || n != len(msg) {
			t.Fatalf("read %d, %v", n, err)
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per read", n)
	}
}

// A peer that passes more descriptors in one message than a read takes
// leaks none into the service: the read gets at most maxFDsPerRead, and
// the kernel closes the rest (MSG_CTRUNC).
func TestRawReceiverDescriptorFlood(t *testing.T) {
	uc, peer := rawPair(t)
	r := newTestReceiver(t, uc)
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fds := make([]int, 3*maxFDsPerRead)
	for i := range fds {
		fds[i] = int(null.Fd())
	}
	open := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := open()
	if err := unix.Sendmsg(peer, []byte("x"), unix.UnixRights(fds...), nil, 0); err != nil {
		t.Fatal(err)
	}
	n, oobn, err := r.read()
	if err != nil || n != 1 {
		t.Fatalf("read %d bytes, %v", n, err)
	}
	var got []int
	if msgs, err := unix.ParseSocketControlMessage(r.oob[:oobn]); err == nil {
		for _, m := range msgs {
			if fs, err := unix.ParseUnixRights(&m); err == nil {
				got = append(got, fs...)
			}
		}
	}
	if len(got) > maxFDsPerRead {
		t.Errorf("one read took %d descriptors, want at most %d", len(got), maxFDsPerRead)
	}
	for _, fd := range got {
		unix.Close(fd)
	}
	if after := open(); after != before {
		t.Errorf("%d descriptors open after the flood, %d before: the truncated ones leaked", after, before)
	}
}
