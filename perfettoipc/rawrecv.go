package perfettoipc

import (
	"io"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/internal/rawio"
)

// rawReceiver reads a connection's stream and descriptors with recvmsg
// issued as a raw system call (rawio.Recvmsg) from the socket's RawConn:
// the socket is non-blocking (the runtime's poller waits for it), so the
// call never sleeps, and announcing it to the scheduler would only cost
// (the rawio package says what).
type rawReceiver struct {
	rc       syscall.RawConn
	buf, oob []byte
	n, oobn  int
	err      error
	fn       func(fd uintptr) bool // made once: reading allocates nothing
}

func newRawReceiver(rc syscall.RawConn, buf, oob []byte) *rawReceiver {
	r := &rawReceiver{rc: rc, buf: buf, oob: oob}
	r.fn = r.try
	return r
}

// try is the RawConn callback: one recvmsg. It returns false (wait for
// readability, then call again) only on EAGAIN.
func (r *rawReceiver) try(fd uintptr) bool {
	for {
		r.n, r.oobn, r.err = rawio.Recvmsg(int(fd), r.buf, r.oob)
		if r.err != unix.EINTR {
			return r.err != unix.EAGAIN
		}
	}
}

// read receives the next bytes into buf and any control message into
// oob, as net.UnixConn.ReadMsgUnix does: n == 0 with no error is the end
// of the stream, reported as io.EOF.
func (r *rawReceiver) read() (n, oobn int, err error) {
	if err := r.rc.Read(r.fn); err != nil {
		return 0, 0, err
	}
	if r.err != nil {
		return 0, 0, r.err
	}
	if r.n == 0 && r.oobn == 0 {
		return 0, 0, io.EOF
	}
	return r.n, r.oobn, nil
}
