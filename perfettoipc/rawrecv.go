package perfettoipc

import (
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawReceiver reads a connection's stream and descriptors with recvmsg
// issued as a raw system call from the socket's RawConn.
//
// Why raw: the socket is non-blocking (the runtime's poller waits for
// it), so recvmsg never sleeps in the kernel, and announcing it to the
// scheduler (entersyscall) buys nothing. It costs a great deal while a
// producer streams, though: the service goes idle between commits, the
// runtime's monitor thread (sysmon) parks, and the first announced
// system call after each idle moment wakes it, after which it polls
// every 20 µs for a millisecond. Measured with the C SDK producer at
// 1 KiB events, that was about a fifth of the service's context
// switches. A raw call does not wake it.
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
		r.n, r.oobn, r.err = recvmsgRaw(int(fd), r.buf, r.oob)
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

// recvmsgRaw is recvmsg(2) with one iovec, MSG_CMSG_CLOEXEC, as a raw
// system call (no scheduler hand-off; the caller's descriptor must be
// non-blocking).
func recvmsgRaw(fd int, p, oob []byte) (n, oobn int, err error) {
	var iov unix.Iovec
	if len(p) > 0 {
		iov.Base = &p[0]
		iov.SetLen(len(p))
	}
	var msg unix.Msghdr
	msg.Iov = &iov
	msg.SetIovlen(1)
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_CMSG_CLOEXEC)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Controllen), nil
}
