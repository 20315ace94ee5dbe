package smb

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SMB is one shared memory buffer: numPages pages of pageSize bytes. It is
// backed by a memfd mapped MAP_SHARED, so that another process can map the
// same bytes (NewMemfdSMB, MapFD); by an anonymous private mapping, for a
// producer in this process (NewPrivateSMB); or by the Go heap (NewHeapSMB:
// tests).
//
// All state transitions are compare-and-swap operations on the page header
// bitmaps; an SMB is safe for concurrent use by one producer and one
// service (in the same or in different processes).
type SMB struct {
	mem      []byte
	pageSize int
	numPages int
	fd       int  // -1 unless memfd-backed
	mapped   bool // memfd-backed: Close unmaps
	private  bool // NewPrivateSMB: Close frees the pages, a cleanup unmaps
	closed   atomic.Bool
}

// privateBytes is the bytes of NewPrivateSMB mappings that exist now.
var privateBytes atomic.Int64

// PrivateMappedBytes returns the bytes of address space NewPrivateSMB
// mappings hold now: those of SMBs still reachable, closed or not.
func PrivateMappedBytes() int64 { return privateBytes.Load() }

func checkGeometry(size, pageSize int) error {
	if pageSize < MinPageSize || pageSize > MaxPageSize || pageSize%MinPageSize != 0 {
		return fmt.Errorf("smb: page size %d: must be a multiple of %d in [%d, %d]", pageSize, MinPageSize, MinPageSize, MaxPageSize)
	}
	if size < pageSize || size%pageSize != 0 {
		return fmt.Errorf("smb: size %d: must be a non-zero multiple of the page size %d", size, pageSize)
	}
	return nil
}

// NewHeapSMB returns a zeroed (fully free) SMB of size bytes on the Go heap.
func NewHeapSMB(size, pageSize int) (*SMB, error) {
	if err := checkGeometry(size, pageSize); err != nil {
		return nil, err
	}
	words := make([]uint64, size/8) // 8-byte aligned, so every header word is 4-byte aligned
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
	return &SMB{mem: mem, pageSize: pageSize, numPages: size / pageSize, fd: -1}, nil
}

// NewPrivateSMB returns a zeroed SMB of size bytes for a producer in this
// process, mapped anonymously outside the Go heap. On the heap a large SMB
// counts as live data, and the collector's goal, a multiple of the live
// heap, let the process hold that much again in garbage (a 32 MiB SMB:
// about 10 MiB more resident). Pages are faulted in as they are written.
//
// Close gives the pages back to the OS at once but keeps the address range
// mapped, reading as zeros: an in-process writer that has not stopped yet
// may still write into the SMB, and must never fault. The range is unmapped
// by a cleanup once the SMB is unreachable (the writers hold it through
// their arbiter). Such an SMB cannot be handed to another process.
func NewPrivateSMB(size, pageSize int) (*SMB, error) {
	if err := checkGeometry(size, pageSize); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("smb: mapping %d bytes: %w", size, err)
	}
	privateBytes.Add(int64(size))
	s := &SMB{mem: mem, pageSize: pageSize, numPages: size / pageSize, fd: -1, private: true}
	runtime.AddCleanup(s, func(m []byte) {
		_ = unix.Munmap(m)
		privateBytes.Add(-int64(len(m)))
	}, mem)
	return s, nil
}

// NewMemfdSMB creates a zeroed SMB in a new memfd named name, sealed
// against shrinking and growing, and maps it. Fd returns the descriptor to
// hand to another process, which maps it with MapFD.
func NewMemfdSMB(name string, size, pageSize int) (*SMB, error) {
	if err := checkGeometry(size, pageSize); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("smb: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("smb: ftruncate memfd to %d: %w", size, err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("smb: sealing memfd: %w", err)
	}
	s, err := mapFD(fd, size, pageSize)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

// MapFD maps an existing SMB memfd (for example one received from another
// process). The SMB's size is the file's size. The memfd must be sealed
// against shrinking, or the other side could truncate it and make every
// access fault. On success the SMB owns fd and Close closes it.
func MapFD(fd int, pageSize int) (*SMB, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("smb: fstat fd %d: %w", fd, err)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("smb: fd %d: reading seals (not a memfd?): %w", fd, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("smb: fd %d: memfd is not sealed against shrinking", fd)
	}
	if st.Size <= 0 || st.Size > 1<<31 {
		return nil, fmt.Errorf("smb: fd %d: size %d out of range", fd, st.Size)
	}
	return mapFD(fd, int(st.Size), pageSize)
}

func mapFD(fd, size, pageSize int) (*SMB, error) {
	if err := checkGeometry(size, pageSize); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("smb: mmap %d bytes: %w", size, err)
	}
	return &SMB{mem: mem, pageSize: pageSize, numPages: size / pageSize, fd: fd, mapped: true}, nil
}

// Close unmaps a memfd-backed SMB and closes its descriptor; a private SMB
// gives its pages back to the OS and reads as zeros from then on (see
// NewPrivateSMB); a heap SMB is only marked closed. Nobody may use a memfd
// or heap SMB (or slices of it) after Close. Closing twice is a no-op.
func (s *SMB) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.private {
		// The memory stays valid (Size and Bytes too) for writers that
		// are still running: only its pages go.
		if err := unix.Madvise(s.mem, unix.MADV_DONTNEED); err != nil {
			return fmt.Errorf("smb: releasing %d bytes: %w", len(s.mem), err)
		}
		return nil
	}
	var errs []error
	if s.mapped {
		errs = append(errs, unix.Munmap(s.mem))
	}
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
	}
	s.mem = nil
	runtime.KeepAlive(s)
	return errors.Join(errs...)
}

// Closed reports whether Close ran.
func (s *SMB) Closed() bool { return s.closed.Load() }

// Fd is the memfd descriptor, or -1 for a private or heap-backed SMB.
func (s *SMB) Fd() int { return s.fd }

// OnHeap reports whether the SMB's memory is on the Go heap (NewHeapSMB).
func (s *SMB) OnHeap() bool { return !s.mapped && !s.private }

// Size is the SMB size in bytes.
func (s *SMB) Size() int { return len(s.mem) }

// PageSize is the size of every page.
func (s *SMB) PageSize() int { return s.pageSize }

// NumPages is the number of pages.
func (s *SMB) NumPages() int { return s.numPages }

// Bytes exposes the raw SMB memory (for tests, dumps and golden
// comparisons). Writing to it bypasses every state transition.
func (s *SMB) Bytes() []byte { return s.mem }

// PageBitmap atomically loads page p's header bitmap.
// REQUIRES: p < NumPages().
func (s *SMB) PageBitmap(p int) uint32 { return load32(s.mem, p*s.pageSize) }

func (s *SMB) bitmapWord(p int) *uint32 { return word32(s.mem, p*s.pageSize) }

// chunkOffset returns the offset of chunk i of page p under layout l.
func (s *SMB) chunkOffset(p int, l PageLayout, i uint32) int {
	return p*s.pageSize + PageHeaderSize + int(i)*l.ChunkSize(s.pageSize)
}

// chunkBytes returns chunk i of page p under layout l (header included).
func (s *SMB) chunkBytes(p int, l PageLayout, i uint32) []byte {
	off := s.chunkOffset(p, l, i)
	cs := l.ChunkSize(s.pageSize)
	return s.mem[off : off+cs : off+cs]
}

// ReadChunkHeader atomically loads the header of chunk i of page p using
// the page's current layout, packets word first (a writer stores it last;
// see Reader.Scrape). ok is false if the page's layout has no chunk i.
func (s *SMB) ReadChunkHeader(p int, i uint32) (h ChunkHeader, ok bool) {
	l := LayoutOf(s.PageBitmap(p))
	if i >= l.NumChunks() {
		return ChunkHeader{}, false
	}
	off := s.chunkOffset(p, l, i)
	word := load32(s.mem, off+4)
	return DecodeHeaderWords(load32(s.mem, off), word), true
}

// casRetries bounds every CAS loop on a page bitmap: the other side of the
// SMB is not trusted to stop changing it.
const casRetries = 64

// tryPartition turns a free page into a page with layout l (all chunks
// Free). It fails if the page is not free.
func (s *SMB) tryPartition(p int, l PageLayout) bool {
	return atomic.CompareAndSwapUint32(s.bitmapWord(p), 0, uint32(l)<<LayoutShift)
}

// transition moves chunk i of page p from state from to state to. It fails
// if the chunk is not in state from or the page layout has no chunk i. It
// returns the layout the page had at the moment of the swap.
func (s *SMB) transition(p int, i uint32, from, to ChunkState) (PageLayout, bool) {
	w := s.bitmapWord(p)
	for range casRetries {
		old := atomic.LoadUint32(w)
		l := LayoutOf(old)
		if i >= l.NumChunks() || StateOf(old, i) != from {
			return l, false
		}
		if atomic.CompareAndSwapUint32(w, old, WithState(old, i, to)) {
			return l, true
		}
	}
	return 0, false
}

// release moves chunk i of page p from BeingRead to Free, zeroing its header
// first; if every chunk of the page is then free, the page becomes free
// (bitmap 0).
func (s *SMB) release(p int, l PageLayout, i uint32) bool {
	off := s.chunkOffset(p, l, i)
	store32(s.mem, off, 0)
	store32(s.mem, off+4, 0)
	yieldAt(siteReleaseCleared)
	w := s.bitmapWord(p)
	for range casRetries {
		old := atomic.LoadUint32(w)
		if LayoutOf(old) != l || StateOf(old, i) != ChunkBeingRead {
			return false
		}
		nw := WithState(old, i, ChunkFree)
		if nw&AllChunksMask == 0 {
			nw = 0
		}
		if atomic.CompareAndSwapUint32(w, old, nw) {
			return true
		}
	}
	return false
}
