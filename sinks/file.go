package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

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
}

// fileHooks lets tests replace the clock and fsync.
type fileHooks struct {
	tick <-chan time.Time     // replaces the fsync ticker when non-nil
	sync func(*os.File) error // replaces (*os.File).Sync when non-nil
}

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
	out       io.Writer  // f, or comp writing into f
	comp      compressor // nil without compression; reused across rotations
	buf       []byte     // whole records not yet handed to out
	hdr       [tracefile.MaxRecordHeaderSize]byte
	fileBytes int64 // Trace bytes in the current file, buf included
	index     int   // rotation index of the current file
	pendPkts  uint64
	pendBytes uint64 // packets/bytes in buf, counted as written already
	stats     SinkStats
	err       error // sticky: after a failed write the file is abandoned
	closed    bool

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
	s := &FileSink{opts: opts, hooks: hooks, buf: make([]byte, 0, opts.BufferSize)}
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

// FileName returns the name of the file with rotation index i: the
// configured path for 0, path + "." + i after that.
func FileName(path string, i int) string {
	if i == 0 {
		return path
	}
	return path + "." + strconv.Itoa(i)
}

// open creates the file for s.index. REQUIRES: mu held or not yet shared.
func (s *FileSink) open() error {
	name := FileName(s.opts.Path, s.index)
	var f *os.File
	if s.opts.Path == StdoutPath {
		f = os.Stdout
	} else {
		var err error
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("sinks: file sink: creating %s: %w", name, err)
		}
	}
	s.f, s.out, s.fileBytes = f, f, 0
	if s.comp != nil {
		s.comp.Reset(f)
		s.out = s.comp
	}
	return nil
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
		if s.err != nil {
			s.dropLocked(packets[i:])
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
	if s.opts.MaxFileSize > 0 && s.fileBytes > 0 && s.fileBytes+rec >= s.opts.MaxFileSize {
		if err := s.rotateLocked(); err != nil {
			s.fail(err)
			s.dropLocked([][]byte{p})
			return
		}
	}
	if len(s.buf)+int(rec) > cap(s.buf) {
		if err := s.flushLocked(false); err != nil {
			s.dropLocked([][]byte{p})
			return
		}
	}
	if int(rec) <= cap(s.buf) {
		s.buf = tracefile.AppendRecord(s.buf, p)
		s.pendPkts++
		s.pendBytes += uint64(len(p))
	} else {
		h := tracefile.AppendRecordHeader(s.hdr[:0], len(p))
		if _, err := s.out.Write(h); err != nil {
			s.fail(fmt.Errorf("sinks: file sink: writing %s: %w", FileName(s.opts.Path, s.index), err))
			s.dropLocked([][]byte{p})
			return
		}
		if _, err := s.out.Write(p); err != nil {
			s.fail(fmt.Errorf("sinks: file sink: writing %s: %w", FileName(s.opts.Path, s.index), err))
			s.dropLocked([][]byte{p})
			return
		}
	}
	s.fileBytes += rec
	s.stats.PacketsWritten++
	s.stats.BytesWritten += uint64(len(p))
}

func (s *FileSink) fail(err error) {
	if s.err == nil {
		s.err = err
	}
	s.stats.Errors++
}

func (s *FileSink) dropLocked(packets [][]byte) {
	s.stats.PacketsDroppedError += uint64(len(packets))
	s.stats.BytesDroppedError += countBytes(packets)
}

// flushLocked hands the buffered records to the file (or the compressor);
// with compFlush it also makes the compressor emit what it holds. On
// failure the buffered packets move from written to dropped.
func (s *FileSink) flushLocked(compFlush bool) error {
	if s.err != nil {
		return s.err
	}
	if len(s.buf) > 0 {
		_, err := s.out.Write(s.buf)
		s.buf = s.buf[:0]
		if err != nil {
			s.stats.PacketsWritten -= s.pendPkts
			s.stats.BytesWritten -= s.pendBytes
			s.stats.PacketsDroppedError += s.pendPkts
			s.stats.BytesDroppedError += s.pendBytes
			s.pendPkts, s.pendBytes = 0, 0
			s.fail(fmt.Errorf("sinks: file sink: writing %s: %w", FileName(s.opts.Path, s.index), err))
			return s.err
		}
		s.pendPkts, s.pendBytes = 0, 0
	}
	if compFlush && s.comp != nil {
		if err := s.comp.Flush(); err != nil {
			s.fail(fmt.Errorf("sinks: file sink: compressing %s: %w", FileName(s.opts.Path, s.index), err))
			return s.err
		}
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
	if err == nil && s.comp != nil {
		if cerr := s.comp.Close(); cerr != nil {
			s.fail(fmt.Errorf("sinks: file sink: compressing %s: %w", FileName(s.opts.Path, s.index), cerr))
			err = s.err
		}
	}
	if s.f == os.Stdout {
		s.f, s.out = nil, nil
		return err
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
	s.f, s.out = nil, nil
	return err
}

func (s *FileSink) rotateLocked() error {
	if err := s.finishFileLocked(); err != nil {
		return err
	}
	s.index++
	s.stats.FilesRotated++
	return s.open()
}

// Flush hands everything written so far to the OS (through the
// compressor, which emits a block). It does not fsync.
func (s *FileSink) Flush(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
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

// Files returns the names of the files written so far, in order.
func (s *FileSink) Files() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, s.index+1)
	for i := 0; i <= s.index; i++ {
		out = append(out, FileName(s.opts.Path, i))
	}
	return out
}
