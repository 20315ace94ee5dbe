package perfettosvc

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/internal/rawio"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// fdSink writes the trace into the file a consumer passed (Perfetto's
// write_into_file with a descriptor): each packet framed as a Trace's
// packet field.
//
// A batch goes out in writev calls that take the longer packets from where
// the read pass put them: only the record headers and the short packets
// are copied, into the sink's own buffer. Copying every packet into one
// buffer for a single write cost about 6% of a streaming session's CPU
// with 1 KiB packets (the batch is cold in the cache by then).
type fdSink struct {
	f       *os.File
	rc      syscall.RawConn // nil: f.Write (f has no descriptor to writev)
	writeFn func(fd uintptr) bool
	// raw: writev never sleeps on this descriptor (rawio.NeverSleeps),
	// so it is issued as a raw system call (the rawio package says why).
	raw bool

	mu    sync.Mutex
	stats sinks.SinkStats
	buf   []byte       // headers and short packets, back to back
	segs  []gatherSeg  // the batch's bytes in file order
	iovs  []unix.Iovec // segs as the kernel takes them
	rest  []unix.Iovec // what writev has not written yet: a tail of iovs
	err   error        // writev's failure in writeFn
}

// gatherSeg is a run of the batch's bytes: buf[off:end], or a packet
// written from where it is.
type gatherSeg struct {
	ext      []byte
	off, end int
}

// gatherCopyMax is the longest packet copied into the sink's buffer
// rather than given to the kernel as a slice of its own: below it, an
// iovec costs more than the copy.
const gatherCopyMax = 256

// fdSinkBufMax bounds the sink's buffer of headers and short packets: a
// batch of short packets goes out in writes of about this size, instead
// of one buffer on the heap as large as the batch (issue 27: 200-byte
// packets made it grow to the batch's 320 KiB).
const fdSinkBufMax = 64 << 10

// maxRecordHeader is the longest record header (a tag byte and a length
// varint).
const maxRecordHeader = 1 + binary.MaxVarintLen64

// iovMax is the most iovecs one writev takes (Linux's UIO_MAXIOV).
const iovMax = 1024

func newFDSink(f *os.File) *fdSink {
	s := &fdSink{f: f}
	if rc, err := f.SyscallConn(); err == nil {
		s.rc = rc
		rc.Control(func(fd uintptr) { s.raw = rawio.NeverSleeps(int(fd)) })
	}
	s.writeFn = s.writev // bound once: the hot path allocates nothing
	return s
}

func (s *fdSink) Write(_ context.Context, packets [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64     // bytes of the packets gathered so far
	var sent int     // packets before this one are written
	var sentN uint64 // their bytes
	s.buf, s.segs = s.buf[:0], s.segs[:0]
	from := 0 // start of the buffer's current run
	for i, p := range packets {
		if len(p) < gatherCopyMax && len(s.buf)+maxRecordHeader+len(p) > fdSinkBufMax {
			// Write what is gathered: the buffer stays within
			// fdSinkBufMax however many short packets a batch holds.
			if from < len(s.buf) {
				s.segs = append(s.segs, gatherSeg{off: from, end: len(s.buf)})
			}
			if err := s.flush(); err != nil {
				return s.failed(packets, sent, sentN, err)
			}
			sent, sentN = i, n
			s.buf, s.segs, from = s.buf[:0], s.segs[:0], 0
		}
		n += uint64(len(p))
		s.buf = tracefile.AppendRecordHeader(s.buf, len(p))
		if len(p) < gatherCopyMax {
			s.buf = append(s.buf, p...)
			continue
		}
		s.segs = append(s.segs, gatherSeg{off: from, end: len(s.buf)}, gatherSeg{ext: p})
		from = len(s.buf)
	}
	if from < len(s.buf) {
		s.segs = append(s.segs, gatherSeg{off: from, end: len(s.buf)})
	}
	if err := s.flush(); err != nil {
		return s.failed(packets, sent, sentN, err)
	}
	s.stats.PacketsWritten += uint64(len(packets))
	s.stats.BytesWritten += n
	return nil
}

// failed accounts a batch whose write failed after its first sent
// packets (sentN bytes) were written: those count as written, the rest
// as a loss.
func (s *fdSink) failed(packets [][]byte, sent int, sentN uint64, err error) error {
	var all uint64
	for _, p := range packets {
		all += uint64(len(p))
	}
	s.stats.Errors++
	s.stats.PacketsWritten += uint64(sent)
	s.stats.BytesWritten += sentN
	s.stats.PacketsDroppedError += uint64(len(packets) - sent)
	s.stats.BytesDroppedError += all - sentN
	return fmt.Errorf("perfetto consumer's output file: %w", err)
}

// flush writes s.segs, in as many writev calls as it takes.
func (s *fdSink) flush() error {
	if s.rc == nil {
		for _, g := range s.segs {
			b := g.ext
			if b == nil {
				b = s.buf[g.off:g.end]
			}
			if _, err := s.f.Write(b); err != nil {
				return err
			}
		}
		return nil
	}
	s.iovs = s.iovs[:0]
	for _, g := range s.segs {
		b := g.ext
		if b == nil {
			b = s.buf[g.off:g.end]
		}
		if len(b) == 0 {
			continue
		}
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		s.iovs = append(s.iovs, v)
	}
	s.rest, s.err = s.iovs, nil
	err := s.rc.Write(s.writeFn)
	clear(s.iovs) // do not pin the batch
	clear(s.segs)
	if err != nil {
		return err
	}
	return s.err
}

// writev is the RawConn callback: it writes what is left of s.rest,
// returning false to wait when a non-blocking descriptor is full.
func (s *fdSink) writev(fd uintptr) bool {
	for len(s.rest) > 0 {
		k := min(len(s.rest), iovMax)
		var w uintptr
		var errno syscall.Errno
		if s.raw {
			w, _, errno = unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&s.rest[0])), uintptr(k))
		} else {
			w, _, errno = unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&s.rest[0])), uintptr(k))
		}
		switch {
		case errno == unix.EINTR:
			continue
		case errno == unix.EAGAIN:
			return false
		case errno != 0:
			s.err = errno
			return true
		case w == 0:
			s.err = io.ErrShortWrite
			return true
		}
		s.advance(int(w))
	}
	return true
}

// advance drops the first w written bytes from s.rest.
func (s *fdSink) advance(w int) {
	i := 0
	for i < len(s.rest) && w >= int(s.rest[i].Len) {
		w -= int(s.rest[i].Len)
		i++
	}
	s.rest = s.rest[i:]
	if w > 0 {
		v := &s.rest[0]
		v.Base = (*byte)(unsafe.Add(unsafe.Pointer(v.Base), w))
		v.SetLen(int(v.Len) - w)
	}
}

func (s *fdSink) Flush(context.Context) error { return nil }
func (s *fdSink) Close(context.Context) error { return s.f.Close() }
func (s *fdSink) Stats() sinks.SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}
