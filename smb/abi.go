package smb

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Sizes and limits of the shared memory ABI (all little-endian).
const (
	// MinPageSize is the smallest page size; page sizes are multiples of it.
	MinPageSize = 4096
	// MaxPageSize is the largest page size the ABI can express (16-bit chunk sizes).
	MaxPageSize = 65536
	// MaxServicePageSize is the largest page size the service accepts.
	MaxServicePageSize = 32768
	// DefaultShmSize is the service's default SMB size (256 KiB).
	DefaultShmSize = 256 * 1024
	// DefaultPageSize is the service's default page size (4 KiB).
	DefaultPageSize = 4096
	// MaxShmSize is the largest SMB the service creates (32 MiB).
	MaxShmSize = 32 * 1024 * 1024

	// PageHeaderSize is the size of the header at the start of every page.
	PageHeaderSize = 8
	// ChunkHeaderSize is the size of the header at the start of every chunk.
	ChunkHeaderSize = 8
	// MaxChunksPerPage is the largest number of chunks a page layout holds.
	MaxChunksPerPage = 14
	// PacketHeaderSize is the size of the reserved fragment size prefix
	// (a 4-byte redundant varint).
	PacketHeaderSize = 4
	// DropPacketSize is the fragment size a writer stores to say it aborted
	// the packet (the largest 4-byte varint value).
	DropPacketSize = 0x0FFFFFFF
	// MaxMessageLength is the largest message a 4-byte size prefix can hold.
	MaxMessageLength = 1<<28 - 1
	// MaxPacketCount is the largest value of a chunk header's 10-bit count.
	MaxPacketCount = 1023
	// MaxPacketsPerChunk is the TraceWriter's own per-chunk packet limit; one
	// count is kept for the inflated count of a finished packet.
	MaxPacketsPerChunk = 1022
	// MaxWriterID is the largest valid writer id (0 is invalid).
	MaxWriterID = 0x7FFF
	// MinFreeBytesForPacket is the least room a chunk must have left for the
	// writer to start a new packet in it (4-byte header + 8 bytes).
	MinFreeBytesForPacket = PacketHeaderSize + 8
)

// Chunk flags (the 6-bit flags field of a chunk header's packets word).
const (
	// FlagFirstPacketContinuesFromPrevChunk: the first fragment continues a
	// packet begun in chunk_id-1 of the same writer.
	FlagFirstPacketContinuesFromPrevChunk = 0x01
	// FlagLastPacketContinuesOnNextChunk: the last fragment continues in
	// chunk_id+1 of the same writer.
	FlagLastPacketContinuesOnNextChunk = 0x02
	// FlagChunkNeedsPatching: the chunk holds size fields that will be filled
	// by out-of-band patches.
	FlagChunkNeedsPatching = 0x04
	// FlagsMask covers the flags the ABI defines.
	FlagsMask = 0x07
)

// ChunkState is the 2-bit state of one chunk in a page header bitmap.
type ChunkState uint32

// Chunk states. BeingRead (2) comes before Complete (3) numerically.
const (
	// ChunkFree: nobody owns the chunk; the producer may acquire it.
	ChunkFree ChunkState = 0
	// ChunkBeingWritten: owned by the producer.
	ChunkBeingWritten ChunkState = 1
	// ChunkBeingRead: owned by the service, which is copying it.
	ChunkBeingRead ChunkState = 2
	// ChunkComplete: the producer is done; the service may read it.
	ChunkComplete ChunkState = 3
)

// String names the state.
func (s ChunkState) String() string {
	switch s {
	case ChunkFree:
		return "Free"
	case ChunkBeingWritten:
		return "BeingWritten"
	case ChunkBeingRead:
		return "BeingRead"
	case ChunkComplete:
		return "Complete"
	}
	return fmt.Sprintf("ChunkState(%d)", uint32(s))
}

// PageLayout is the 3-bit layout code of a page header (how many chunks).
type PageLayout uint32

// Page layouts.
const (
	// LayoutNotPartitioned marks a free page.
	LayoutNotPartitioned PageLayout = 0
	// LayoutDiv1 is one chunk per page.
	LayoutDiv1 PageLayout = 1
	// LayoutDiv2 is two chunks per page.
	LayoutDiv2 PageLayout = 2
	// LayoutDiv4 is four chunks per page.
	LayoutDiv4 PageLayout = 3
	// LayoutDiv7 is seven chunks per page.
	LayoutDiv7 PageLayout = 4
	// LayoutDiv14 is fourteen chunks per page.
	LayoutDiv14 PageLayout = 5
)

// Page header bitmap fields.
const (
	// LayoutShift is the bit position of the layout in the page bitmap.
	LayoutShift = 28
	// LayoutMask selects the layout bits of the page bitmap.
	LayoutMask = 0x70000000
	// AllChunksMask selects the 14 two-bit chunk states of the page bitmap.
	AllChunksMask = 0x0FFFFFFF
)

var numChunksForLayout = [8]uint32{0, 1, 2, 4, 7, 14, 0, 0}

// NumChunks is the number of chunks of the layout (0 for NotPartitioned
// and the reserved codes 6 and 7).
func (l PageLayout) NumChunks() uint32 { return numChunksForLayout[l&7] }

// ChunkSize is the size of each chunk (header included) of a page of
// pageSize bytes with layout l: (pageSize-8)/chunks rounded down to 4.
func (l PageLayout) ChunkSize(pageSize int) int {
	n := l.NumChunks()
	if n == 0 || pageSize < PageHeaderSize {
		return 0
	}
	return ((pageSize - PageHeaderSize) / int(n)) &^ 3
}

// LayoutOf extracts the layout from a page header bitmap.
func LayoutOf(bitmap uint32) PageLayout { return PageLayout((bitmap & LayoutMask) >> LayoutShift) }

// StateOf extracts chunk i's state from a page header bitmap.
func StateOf(bitmap uint32, i uint32) ChunkState { return ChunkState((bitmap >> (2 * i)) & 3) }

// WithState returns bitmap with chunk i's state replaced by s.
func WithState(bitmap uint32, i uint32, s ChunkState) uint32 {
	return bitmap&^(3<<(2*i)) | uint32(s)<<(2*i)
}

// IsPageComplete reports whether every chunk of a partitioned page is
// Complete.
func IsPageComplete(bitmap uint32) bool {
	n := LayoutOf(bitmap).NumChunks()
	if n == 0 {
		return false
	}
	mask := uint32(AllChunksMask) & (1<<(2*n) - 1)
	return bitmap&mask == mask
}

// FreeChunksMask returns a bit set with bit i set when chunk i of the page
// is Free. An unpartitioned page has no free chunks (partition it first).
func FreeChunksMask(bitmap uint32) uint32 {
	n := LayoutOf(bitmap).NumChunks()
	var m uint32
	for i := uint32(0); i < n; i++ {
		if StateOf(bitmap, i) == ChunkFree {
			m |= 1 << i
		}
	}
	return m
}

// ChunkHeader is the decoded 8-byte header at the start of every chunk.
type ChunkHeader struct {
	// ChunkID is the writer's sequence number of this chunk.
	ChunkID uint32
	// WriterID identifies the writer (sequence) within the producer.
	WriterID uint16
	// Count is the number of fragments in the chunk (10 bits).
	Count uint16
	// Flags are the Flag* bits (6 bits).
	Flags uint8
}

// PacketsWord packs count and flags into the 16-bit packets field.
func PacketsWord(count uint16, flags uint8) uint16 {
	return count&0x3FF | uint16(flags&0x3F)<<10
}

// HeaderWord packs writer id, count and flags into the 32-bit word at chunk
// offset 4 (writer_id in the low half, packets in the high half), which Go
// reads and writes with 32-bit atomics.
func HeaderWord(writerID uint16, count uint16, flags uint8) uint32 {
	return uint32(writerID) | uint32(PacketsWord(count, flags))<<16
}

// DecodeHeaderWords builds a ChunkHeader from the two 32-bit header words.
func DecodeHeaderWords(chunkID, word uint32) ChunkHeader {
	p := uint16(word >> 16)
	return ChunkHeader{ChunkID: chunkID, WriterID: uint16(word), Count: p & 0x3FF, Flags: uint8(p >> 10)}
}

// Encode writes the header into b[0:8].
func (h ChunkHeader) Encode(b []byte) {
	_ = b[7]
	putLE32(b[0:], h.ChunkID)
	putLE32(b[4:], HeaderWord(h.WriterID, h.Count, h.Flags))
}

// DecodeChunkHeader reads a header from b[0:8].
func DecodeChunkHeader(b []byte) ChunkHeader {
	_ = b[7]
	return DecodeHeaderWords(le32(b), le32(b[4:]))
}

// PutRedundantVarint writes v (< 2^28) into b[0:4] as a fixed-length 4-byte
// varint, the encoding of reserved size fields.
func PutRedundantVarint(b []byte, v uint32) {
	_ = b[3]
	b[0] = byte(v) | 0x80
	b[1] = byte(v>>7) | 0x80
	b[2] = byte(v>>14) | 0x80
	b[3] = byte(v>>21) & 0x7F
}

func le32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func putLE32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// word32 returns the 4-byte aligned word at b[off] for atomic access.
// REQUIRES: the address of b[off] is 4-byte aligned and off+4 <= len(b).
func word32(b []byte, off int) *uint32 {
	w := b[off : off+4 : off+4] // bounds check without touching the bytes
	return (*uint32)(unsafe.Pointer(unsafe.SliceData(w)))
}

func load32(b []byte, off int) uint32     { return atomic.LoadUint32(word32(b, off)) }
func store32(b []byte, off int, v uint32) { atomic.StoreUint32(word32(b, off), v) }

// EnsureValidShmSizes applies the service's sizing rules: zero picks the
// default, the page size is clamped to 32 KiB and the SMB size to 32 MiB,
// and if the result is not a valid pair (page a power-of-two multiple of
// 4 KiB, size a non-zero multiple of page) both fall back to the defaults.
func EnsureValidShmSizes(size, pageSize uint32) (validSize, validPageSize uint32) {
	if pageSize == 0 {
		pageSize = DefaultPageSize
	}
	if size == 0 {
		size = DefaultShmSize
	}
	pageSize = min(pageSize, MaxServicePageSize)
	size = min(size, MaxShmSize)
	ratio := pageSize / MinPageSize
	valid := pageSize >= MinPageSize && pageSize%MinPageSize == 0 && ratio&(ratio-1) == 0 &&
		size >= pageSize && size%pageSize == 0
	if !valid {
		return DefaultShmSize, DefaultPageSize
	}
	return size, pageSize
}

// ChooseShmSizes picks each of SMB size and page size from the trace
// config's producer entry when non-zero, else from the producer's hint, and
// then applies EnsureValidShmSizes.
func ChooseShmSizes(configSize, configPageSize, hintSize, hintPageSize uint32) (size, pageSize uint32) {
	size, pageSize = configSize, configPageSize
	if size == 0 {
		size = hintSize
	}
	if pageSize == 0 {
		pageSize = hintPageSize
	}
	return EnsureValidShmSizes(size, pageSize)
}
