// Package rawio decides which writes are issued as raw system calls, and
// issues them.
//
// Go announces every system call to its scheduler (entersyscall), so that
// a call that sleeps does not hold up other goroutines. A call that never
// sleeps gains nothing from it, and a streaming service pays for it: when
// a write outlasts a tick of the runtime's monitor thread, the monitor
// hands the thread's processor to another thread, and the writer parks
// and is woken to get it back; after an idle moment the first announced
// call wakes the monitor, which then polls every 20 µs for a millisecond.
// With the Perfetto C SDK producer and the real perfetto consumer
// streaming 1 KiB events into /dev/shm, raw calls on the producer socket
// and the output file cut `serve --perfetto`'s context switches by a
// quarter.
//
// rawio owns the rule (NeverSleeps) and the raw write loop. It must not
// open, close or keep descriptors, and a caller must not use Write on a
// descriptor NeverSleeps refused: a raw call that sleeps holds a Go
// processor, and the garbage collector's stop-the-world, until it returns.
package rawio

import (
	"io"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NeverSleeps reports whether a write to fd is work the kernel does on the
// caller's CPU without waiting:
//   - a regular file on a memory file system (tmpfs, ramfs): no device
//     to wait for;
//   - a descriptor in non-blocking mode that is not a regular file (a
//     full pipe or socket answers EAGAIN).
//
// A file on a disk file system can wait for writeback (dirty-page
// throttling sleeps up to 200 ms per call), a blocking pipe for its
// reader, a terminal for its line discipline: those are not. (A tmpfs
// write on a machine out of memory can still wait in page reclaim; that
// wait holds one Go processor while it lasts, as it would hold traced's
// one thread.)
func NeverSleeps(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return false
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		return onMemFS(fd)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	return err == nil && fl&unix.O_NONBLOCK != 0
}

// MemFile reports whether fd is a regular file on a memory file system:
// one NeverSleeps accepts and Write may write.
func MemFile(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && onMemFS(fd)
}

func onMemFS(fd int) bool {
	var fs unix.Statfs_t
	if unix.Fstatfs(fd, &fs) != nil {
		return false
	}
	return fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC
}

// Write writes all of p to fd, a MemFile, in raw
// write(2) calls: partial writes continue, EINTR is retried. It returns
// the bytes written and the first error (io.ErrShortWrite if the kernel
// took nothing without saying why). It allocates nothing.
func Write(fd int, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		w, _, errno := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return n, errno
		case w == 0:
			return n, io.ErrShortWrite
		}
		n += int(w)
	}
	return n, nil
}

// Recvmsg is recvmsg(2) on a non-blocking socket, as a raw system call:
// one iovec (p), control messages into oob, MSG_CMSG_CLOEXEC. It returns
// the bytes and control bytes received, or the kernel's error (EAGAIN
// when nothing is waiting: wait for readability, then call again). It
// allocates nothing.
func Recvmsg(fd int, p, oob []byte) (n, oobn int, err error) {
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
