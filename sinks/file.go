package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/internal/rawio"
	"github.com/tracepipe/tracepipe/tracefile"
)

// File sink defaults and limits.
const (
	// DefaultFsyncPeriod is used when FileOptions.FsyncPeriod is 0; it
	// matches Perfetto's default file_write_period_ms.
	DefaultFsyncPeriod = 5 * time.Second
	// MinFsyncPeriod is the shortest period accepted (Perfetto's minimum
	// file write period); shorter positive periods are raised to it.
	MinFsyncPeriod = 100 * time.Millisecond
	// DefaultFileBufferSize is the record buffer of a file sink.
	DefaultFileBufferSize = 256 << 10
)

// Compression names accepted by FileOptions.Compression.
const (
	CompressionNone = "none"
	CompressionGzip = "gzip"
	CompressionZstd = "zstd"
)

// StdoutPath as FileOptions.Path streams the trace to standard output
// (no rotation, no fsync; Close leaves stdout open).
const StdoutPath = "-"

// FileOptions configures a file sink.
type FileOptions struct {
	// Path of the first file. It is created exclusively (O_EXCL): an
	// existing file is never overwritten or truncated.
	Path string
	// Compression is "", "none", "gzip" or "zstd". Each file is one complete
	// compressed stream.
	Compression string
	// MaxFileSize caps the Trace bytes (uncompressed, framing included) of
	// one file; 0 means no cap. Like Perfetto, a file stays strictly below
	// the cap: before a record that would bring it to the cap or beyond,
	// the file is closed and the next one opened. Rotated files are named
	// Path, Path.1, Path.2, ... in write order. A single record at or over
	// the cap gets a file of its own rather than being dropped.
	MaxFileSize int64
	// FsyncPeriod: every period the sink flushes its buffer and fsyncs the
	// file. 0 means DefaultFsyncPeriod, a negative value disables the
	// periodic fsync (files are still synced on rotation and Close).
	FsyncPeriod time.Duration
	// BufferSize of the record buffer (0 → DefaultFileBufferSize).
	BufferSize int
	// Rotatable keeps what a new file needs to start self-contained, so
	// that Rotate works without MaxFileSize (rotate_now.go).
	Rotatable bool
	// ResumeMax, when > 0, makes a sink stopped by a full file system
	// (ENOSPC, EDQUOT) try again, first after a second, then at doubling
	// intervals up to ResumeMax, and continue in a new file once there is
	// room (resume.go). 0: a full file system stops the sink for good (on_error: stop).
	ResumeMax time.Duration
	// Logger receives the sink's own messages (a resume); nil discards them.
	Logger *slog.Logger
}

// fileHooks lets tests replace the clock, fsync, writes, fallocate and
// the creation of files.
type fileHooks struct {
	tick      <-chan time.Time                     // replaces the fsync ticker when non-nil
	sync      func(*os.File) error                 // replaces (*os.File).Sync when non-nil
	write     func(*os.File, []byte) (int, error)  // replaces (*os.File).Write when non-nil
	fallocate func(f *os.File, off, n int64) error // replaces the reserve's fallocate when non-nil
	create    func(name string) (*os.File, error)  // replaces the exclusive create when non-nil
	now       func() time.Time                     // replaces time.Now (resume intervals) when non-nil
}

// ReserveSize is the room a file sink keeps allocated past the end of its
// file (fallocate with FALLOC_FL_KEEP_SIZE), so that when the disk fills
// up the final TraceStats and the end of a compressed stream still fit:
// the sink stops taking packets as soon as it cannot extend the reserve,
// before any write fails.
const ReserveSize = 64 << 10

// compHeldMax bounds what a compressor writes at once: a zstd block
// (128 KiB) or a deflate block, with their headers, and room to spare.
const compHeldMax = 256 << 10

// compressor is what gzip.Writer and zstd.Encoder have in common.
type compressor interface {
	io.Writer
	Flush() error
	Close() error
	Reset(io.Writer)
}

// FileSink streams packets into Trace files (see [FileOptions]).
//
// The file is valid at every packet boundary: records are appended whole
// to an in-memory buffer, and the buffer is handed to the file (or the
// compressor) only at record boundaries; a record larger than the buffer
// is written directly after the buffer. So after any Flush, or a kill at
// any moment, a file ends at a record boundary or with one truncated last
// record, which tracefile.Reader reports as ErrTruncated after returning
// every complete packet.
type FileSink struct {
	opts  FileOptions
	hooks fileHooks

	mu        sync.Mutex // guards everything below
	f         *os.File
	rawFD     int        // f's descriptor when f is on tmpfs or ramfs (rawio.MemFile): written raw; else -1
	out       io.Writer  // f, or comp writing into f
	comp      compressor // nil without compression; reused across rotations
	buf       []byte     // whole records not yet handed to out
	hdr       [tracefile.MaxRecordHeaderSize]byte
	fileBytes int64 // Trace bytes in the current file, buf included
	index     int   // rotation index of the current file
	pendPkts  uint64
	pendBytes uint64 // packets/bytes in buf, counted as written already
	stats     SinkStats
	err       error // sticky: the first failure; packets written after it are dropped
	closed    bool
	missing   bool // the file for index was never created (a failed open)
	fresh     bool // no packet but the preamble reached the current file

	// Resuming after a full file system (resume.go).
	noRoom bool // err is a full file system: a later attempt may find room
	gap    outage
	one    [1][]byte

	// The file on disk.
	disk       int64 // bytes handed to the OS for the current file (compressed bytes when compressed)
	good       int64 // disk offset just after the last complete record (uncompressed files)
	reservedTo int64 // the reserve is allocated up to this offset
	reserveOff bool  // the file system cannot reserve (no fallocate)
	broken     bool  // the stream cannot continue (a failed write into a compressed stream)
	lastChance bool  // WriteLast is writing past a failure

	// Rotation (MaxFileSize > 0): every file starts with a preamble built
	// from the fold of what was written (rotation.go) and ends with a
	// TraceStats.
	restore     *restoreState
	internal    bool  // writing the preamble or the trailer
	preamble    int64 // fileBytes of the current file's preamble
	compPending int64 // bytes handed to the compressor since its last Flush
	trailerLen  int64 // size of the last trailer written
	scratch     []byte
	extra       func() SinkStats // the lane's own counters, for the trailer

	stop chan struct{} // closed by Close to end the fsync goroutine
	done chan struct{} // closed by the fsync goroutine when it ends
}

var _ Sink = (*FileSink)(nil)

// NewFile creates the first file and starts the periodic fsync.
func NewFile(opts FileOptions) (*FileSink, error) { return newFileSink(opts, fileHooks{}) }

func newFileSink(opts FileOptions, hooks fileHooks) (*FileSink, error) {
	if opts.Path == "" {
		return nil, errors.New("sinks: file sink: `path` is empty")
	}
	if opts.MaxFileSize < 0 {
		return nil, fmt.Errorf("sinks: file sink: `max_file_size` is %d, want >= 0", opts.MaxFileSize)
	}
	if opts.BufferSize <= 0 {
		opts.BufferSize = DefaultFileBufferSize
	}
	s := &FileSink{opts: opts, hooks: hooks, buf: make([]byte, 0, opts.BufferSize), rawFD: -1}
	if opts.Path == StdoutPath || opts.ResumeMax < 0 {
		s.opts.ResumeMax = 0 // a pipe cannot start a new file
	}
	// A sink that may resume after a full file system continues in a new
	// file, which must start self-contained like a rotated one.
	if opts.MaxFileSize > 0 || opts.Rotatable || s.opts.ResumeMax > 0 {
		s.restore = newRestoreState()
	}
	switch opts.Compression {
	case "", CompressionNone:
	case CompressionGzip:
		s.comp = gzip.NewWriter(io.Discard)
	case CompressionZstd:
		enc, err := zstd.NewWriter(io.Discard, zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("sinks: file sink: zstd: %w", err)
		}
		s.comp = enc
	default:
		return nil, fmt.Errorf("sinks: file sink: `compression` is %q, want \"none\", \"gzip\" or \"zstd\"", opts.Compression)
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	period := fsyncOrDefault(opts.FsyncPeriod)
	if opts.Path == StdoutPath {
		period = -1 // a pipe cannot be synced
	}
	if period > 0 || hooks.tick != nil {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		tick := hooks.tick
		var t *time.Ticker
		if tick == nil {
			t = time.NewTicker(period)
			tick = t.C
		}
		go s.syncLoop(tick, t)
	}
	return s, nil
}

// FileName returns the name of the file with rotation index i
// (tracefile.RotatedFileName: the names of a rotated set are part of the
// format its readers order it by).
func FileName(path string, i int) string { return tracefile.RotatedFileName(path, i) }

// open creates the file for s.index. REQUIRES: mu held or not yet shared.
// A file it cannot create is missing (Files leaves it out) and counts as
// an error.
func (s *FileSink) open() error {
	name := FileName(s.opts.Path, s.index)
	var f *os.File
	if s.opts.Path == StdoutPath {
		f = os.Stdout
	} else {
		var err error
		if s.hooks.create != nil {
			f, err = s.hooks.create(name)
		} else {
			f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		}
		if err != nil {
			s.missing = true
			s.stats.Errors++
		}
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("sinks: file sink: %s already exists and a sink never overwrites: remove it, choose another path, or put {timestamp} in the path: %w", name, err)
		}
		if err != nil {
			note := ""
			if isNoRoom(err) {
				note = s.resumeNote()
			}
			return fmt.Errorf("sinks: file sink: creating %s: %w%s", name, err, note)
		}
	}
	s.missing = false
	s.f = f
	s.rawFD = -1
	if f != os.Stdout && s.hooks.write == nil {
		if rc, err := f.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				if rawio.MemFile(int(fd)) {
					s.rawFD = int(fd)
				}
			})
		}
	}
	return s.startFile()
}

// startFile starts the current file (empty) from its first byte.
func (s *FileSink) startFile() error {
	s.fileBytes, s.fresh = 0, true
	s.disk, s.good, s.reservedTo, s.broken = 0, 0, 0, false
	s.out = diskWriter{s}
	if s.comp != nil {
		s.comp.Reset(diskWriter{s})
		s.out = s.comp
	}
	return s.keepReserve()
}

// diskWriter writes to the current file and counts the bytes on disk.
type diskWriter struct{ s *FileSink }

func (w diskWriter) Write(p []byte) (int, error) {
	s := w.s
	var n int
	var err error
	switch {
	case s.hooks.write != nil:
		n, err = s.hooks.write(s.f, p)
	case s.rawFD >= 0:
		n, err = rawio.Write(s.rawFD, p)
		if err != nil {
			err = &os.PathError{Op: "write", Path: s.f.Name(), Err: err}
		}
	default:
		n, err = s.f.Write(p)
	}
	s.disk += int64(n)
	return n, err
}

// keepReserve extends the room allocated past the end of the file (see
// ReserveSize). When the file system has no room left for it, the sink
// stops taking packets: the error is sticky, nothing written so far is
// lost, and the reserve still holds room for the final TraceStats.
//
// A compressor holds what it was given until its block is full, then
// writes it at once: the reserve also covers that (what it was given since
// its last flush, at worst incompressible, up to compHeldMax), or the
// write would fail past the reserve and break the stream.
func (s *FileSink) keepReserve() error {
	held := min(s.compPending+s.compPending/16, compHeldMax)
	if s.reserveOff || s.lastChance || s.f == os.Stdout || s.reservedTo-s.disk >= ReserveSize/2+held {
		return nil
	}
	// Extend in steps of several flushes, so that fallocate runs once
	// every few writes rather than before each; when the file system has
	// no room for a step, the reserve itself is what counts.
	from := max(s.disk, s.reservedTo)
	to := s.disk + s.reserveStep() + held
	err := s.allocate(from, to-from)
	if err != nil && (errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG)) {
		to = s.disk + ReserveSize + held // > from: the reserve ran short
		err = s.allocate(from, to-from)
	}
	switch {
	case err == nil:
		s.reservedTo = to
		return nil
	case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) || errors.Is(err, unix.EFBIG):
		s.fail(fmt.Errorf("sinks: file sink: %s: no room left on the file system (%w); the sink stopped taking packets, keeping its reserve for the final TraceStats%s", FileName(s.opts.Path, s.index), err, s.resumeNote()))
		return s.err
	default: // EOPNOTSUPP and the like: rely on truncating back instead
		s.reserveOff = true
		return nil
	}
}

// reserveStepMax bounds the step the reserve is extended by.
const reserveStepMax = 4 << 20

// reserveStep is how far past the end of the file keepReserve allocates:
// the reserve plus room for four buffer flushes, at most reserveStepMax.
func (s *FileSink) reserveStep() int64 {
	return int64(min(max(ReserveSize, ReserveSize+4*s.opts.BufferSize), reserveStepMax))
}

// allocate allocates n bytes of the current file from off on, without
// changing its size.
func (s *FileSink) allocate(off, n int64) error {
	if s.hooks.fallocate != nil {
		return s.hooks.fallocate(s.f, off, n)
	}
	return unix.Fallocate(int(s.f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// writeFailed handles a failed write into the current file: an
// uncompressed file is cut back to its last complete record (so it stays
// readable to its last packet, and the final TraceStats can follow it); a
// compressed stream cannot continue.
func (s *FileSink) writeFailed(err error) {
	s.fail(fmt.Errorf("sinks: file sink: writing %s: %w%s", FileName(s.opts.Path, s.index), err, s.resumeNote()))
	if s.comp != nil || s.f == os.Stdout {
		s.broken = true
		return
	}
	s.reservedTo = min(s.reservedTo, s.good) // truncating frees what was allocated past the end
	if terr := s.f.Truncate(s.good); terr != nil {
		s.broken = true
		return
	}
	if _, serr := s.f.Seek(s.good, io.SeekStart); serr != nil {
		s.broken = true
		return
	}
	s.disk = s.good
}

func (s *FileSink) syncLoop(tick <-chan time.Time, t *time.Ticker) {
	defer close(s.done)
	if t != nil {
		defer t.Stop()
	}
	for {
		select {
		case <-s.stop:
			return
		case <-tick:
			s.mu.Lock()
			if !s.closed && s.err == nil && s.f != nil {
				if err := s.flushLocked(true); err == nil {
					_ = s.syncLocked()
				}
			}
			s.mu.Unlock()
		}
	}
}

// Write appends one record per packet. It does not allocate in steady
// state.
func (s *FileSink) Write(ctx context.Context, packets [][]byte) error {
	if err := ctx.Err(); err != nil {
		s.mu.Lock()
		s.dropLocked(packets)
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.dropLocked(packets)
		return ErrClosed
	}
	for i, p := range packets {
		if s.err != nil && !s.lastChance && !s.resumeDue() {
			s.loseLocked(packets[i:])
			return s.err
		}
		s.writeLocked(p)
	}
	return s.err
}

// writeLocked writes one record, rotating first if needed. Failures set
// s.err and count the packet as dropped.
func (s *FileSink) writeLocked(p []byte) {
	rec := int64(tracefile.RecordSize(len(p)))
	if s.opts.MaxFileSize > 0 && s.fileBytes > s.preamble && !s.lastChance && !s.internal && s.mustRotate(rec) {
		if err := s.rotateLocked(); err != nil {
			s.setErr(err) // each failed step counted its own error
			s.loseOne(p)
			return
		}
	}
	if len(s.buf)+int(rec) > cap(s.buf) {
		if err := s.flushLocked(false); err != nil {
			s.loseOne(p)
			return
		}
	}
	if int(rec) <= cap(s.buf) {
		s.buf = tracefile.AppendRecord(s.buf, p)
		s.pendPkts++
		s.pendBytes += uint64(len(p))
	} else {
		if s.comp != nil {
			s.compPending += rec
		}
		h := tracefile.AppendRecordHeader(s.hdr[:0], len(p))
		_, err := s.out.Write(h)
		if err == nil {
			_, err = s.out.Write(p)
		}
		if err != nil {
			s.writeFailed(err)
			s.loseOne(p)
			return
		}
		s.good = s.disk
		_ = s.keepReserve() // on failure this packet is written, the next ones are refused
	}
	s.fileBytes += rec
	s.stats.PacketsWritten++
	s.stats.BytesWritten += uint64(len(p))
	if !s.internal {
		s.fresh = false
		if s.restore != nil {
			s.restore.observe(p)
			s.stats.RestoreOverflows = s.restore.overflows
		}
	}
}

// mustRotate reports whether a record of rec bytes, then the trailer,
// would bring the file to MaxFileSize or beyond, counted in bytes on
// disk. For a compressed file the bound is first estimated from the bytes
// not yet compressed (at worst incompressible); only when it may be
// reached is the compressor flushed to learn the exact size.
func (s *FileSink) mustRotate(rec int64) bool {
	if s.trailerLen == 0 || s.restore.statsChanged {
		s.restore.statsChanged = false
		s.scratch = s.restore.trailer(s.scratch[:0], s.stats)
		s.trailerLen = int64(tracefile.RecordSize(len(s.scratch))) + 32 // counters grow
	}
	need := rec + s.trailerLen
	if s.comp == nil {
		return s.fileBytes+need >= s.opts.MaxFileSize
	}
	need += need/16 + 1<<10 // incompressible data grows a little; the stream's end
	if s.disk+s.compPending+int64(len(s.buf))+need < s.opts.MaxFileSize {
		return false
	}
	if s.flushLocked(true) != nil {
		return false // the failure is recorded; the write path drops
	}
	return s.disk+need >= s.opts.MaxFileSize
}

// SetExtraStats gives the sink the counters kept in front of it (its
// lane's filter and queue), so that the TraceStats ending a rotated file
// counts them too.
func (s *FileSink) SetExtraStats(f func() SinkStats) {
	s.mu.Lock()
	s.extra = f
	s.mu.Unlock()
}

// fail records a failed operation; the first failure is sticky (setErr).
func (s *FileSink) fail(err error) {
	s.setErr(err)
	s.stats.Errors++
}

// setErr makes err the sink's failure unless it failed already. A full
// file system starts an outage that a sink with ResumeMax tries to end
// (resume.go).
func (s *FileSink) setErr(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	s.noRoom = isNoRoom(err)
	if s.noRoom {
		s.outageBegins()
	}
}

func (s *FileSink) dropLocked(packets [][]byte) {
	s.stats.PacketsDroppedError += uint64(len(packets))
	s.stats.BytesDroppedError += countBytes(packets)
}

// flushLocked hands the buffered records to the file (or the compressor);
// with compFlush it also makes the compressor emit what it holds. On
// failure the buffered packets move from written to dropped.
func (s *FileSink) flushLocked(compFlush bool) error {
	if s.broken || s.f == nil {
		return s.err
	}
	if len(s.buf) > 0 {
		if s.comp != nil {
			s.compPending += int64(len(s.buf))
		}
		_, err := s.out.Write(s.buf)
		s.buf = s.buf[:0]
		if err != nil {
			s.writeFailed(err) // first, so that an outage it starts counts these packets
			s.stats.PacketsWritten -= s.pendPkts
			s.stats.BytesWritten -= s.pendBytes
			s.stats.PacketsDroppedError += s.pendPkts
			s.stats.BytesDroppedError += s.pendBytes
			s.pendPkts, s.pendBytes = 0, 0
			return s.err
		}
		s.pendPkts, s.pendBytes = 0, 0
		if s.comp == nil {
			s.good = s.disk
		}
	}
	if compFlush && s.comp != nil {
		if err := s.comp.Flush(); err != nil {
			s.writeFailed(err)
			return s.err
		}
		s.compPending = 0
	}
	if s.err == nil {
		return s.keepReserve()
	}
	return nil
}

func (s *FileSink) syncLocked() error {
	sync := s.hooks.sync
	if sync == nil {
		sync = (*os.File).Sync
	}
	s.stats.FileSyncs++
	if err := sync(s.f); err != nil {
		s.stats.Errors++
		return fmt.Errorf("sinks: file sink: fsync %s: %w", FileName(s.opts.Path, s.index), err)
	}
	return nil
}

// finishFileLocked flushes, ends the compressed stream, syncs and closes
// the current file.
func (s *FileSink) finishFileLocked() error {
	if s.f == nil {
		return s.err // a failed rotation left no file open
	}
	err := s.flushLocked(false)
	if !s.broken && s.comp != nil {
		if cerr := s.comp.Close(); cerr != nil {
			s.writeFailed(cerr)
		}
	}
	if err == nil && s.broken {
		err = s.err
	}
	if s.f == os.Stdout {
		s.f, s.out, s.rawFD = nil, nil, -1
		return err
	}
	if s.reservedTo > s.disk {
		_ = s.f.Truncate(s.disk) // give back the reserve past the end
	}
	if serr := s.syncLocked(); err == nil {
		err = serr
	}
	if cerr := s.f.Close(); cerr != nil {
		s.stats.Errors++
		if err == nil {
			err = fmt.Errorf("sinks: file sink: closing %s: %w", FileName(s.opts.Path, s.index), cerr)
		}
	}
	s.f, s.out, s.rawFD = nil, nil, -1
	return err
}

// rotateLocked ends the current file with a TraceStats, opens the next
// one and starts it with the preamble (rotation.go).
func (s *FileSink) rotateLocked() error {
	s.internal = true
	defer func() { s.internal = false }()
	if err := s.endFileLocked(true); err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	s.writePreamble()
	return s.err
}

// endFileLocked ends the current file, with its trailer when asked, and
// moves to the next index. REQUIRES: s.internal.
func (s *FileSink) endFileLocked(trailer bool) error {
	if trailer {
		st := s.stats
		if s.extra != nil {
			st = st.Add(s.extra())
		}
		s.scratch = s.restore.trailer(s.scratch[:0], st)
		s.writeLocked(s.scratch)
		if s.err == nil {
			_ = s.flushLocked(false)
		}
		if s.err != nil {
			return s.err // the file stays open, cut back to its last whole packet
		}
	}
	err := s.finishFileLocked()
	if s.f == nil { // closed, even after an error: the next file has the next name
		s.index++
		s.stats.FilesRotated++
		s.missing = true // until open creates it
	}
	return err
}

// writePreamble starts the current (new) file self-contained.
// REQUIRES: s.internal.
func (s *FileSink) writePreamble() {
	s.compPending = 0
	s.scratch = s.restore.appendPreamble(s.scratch, s.writeLocked)
	s.preamble = s.fileBytes
}

// Failed returns the sink's first failure (a write error, or no room
// left for the reserve), or nil.
func (s *FileSink) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// WriteLast writes one packet (the final TraceStats) after a failure: an
// uncompressed file is first cut back to its last complete record; a
// file stopped by a full disk writes it into its reserve. It fails only
// when the file cannot take it (a compressed stream broken by a write
// error, or no byte left on an uncompressed file without a reserve; then
// the file still ends at its last complete packet).
func (s *FileSink) WriteLast(packet []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.err != nil && s.canResume() {
		s.resumeLocked() // a last attempt, due or not: the TraceStats goes after the gap
	}
	if s.closed || s.f == nil {
		s.dropLocked([][]byte{packet})
		return ErrClosed
	}
	if s.err == nil {
		s.writeLocked(packet)
		return s.flushLocked(true)
	}
	failure := s.err
	if s.broken {
		s.dropLocked([][]byte{packet})
		return fmt.Errorf("%w; the final TraceStats cannot follow it", failure)
	}
	s.lastChance = true
	defer func() { s.lastChance = false }()
	s.err = nil
	s.writeLocked(packet)
	err := s.flushLocked(true)
	if s.err == nil {
		s.err = failure
	}
	if err != nil {
		return fmt.Errorf("sinks: file sink: the final TraceStats did not fit after %v: %w", failure, err)
	}
	return nil
}

// Flush hands everything written so far to the OS (through the
// compressor, which emits a block). It does not fsync.
func (s *FileSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.err != nil && !s.resumeDue() {
		// Nothing is buffered; a compressor's flush would only spend
		// the reserve kept for the final TraceStats.
		return s.err
	}
	return s.flushLocked(true)
}

// Close stops the periodic fsync, flushes, ends the compressed stream,
// fsyncs and closes the file. A second Close returns nil.
func (s *FileSink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finishFileLocked()
}

// Stats returns the sink's counters.
func (s *FileSink) Stats() SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Files returns the names of the files written so far, in order (none
// when streaming to standard output).
func (s *FileSink) Files() []string {
	if s.opts.Path == StdoutPath {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.index + 1
	if s.missing {
		n-- // never created: the name may even be another's file
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, FileName(s.opts.Path, i))
	}
	return out
}
