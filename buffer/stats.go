package buffer

import "sort"

// Stats are the buffer's counters, Perfetto's TraceStats.BufferStats.
type Stats struct {
	BufferSize                uint64 // rounded buffer size
	BytesWritten              uint64 // outer sizes of records written
	BytesOverwritten          uint64 // outer sizes of records evicted with unread data
	BytesRead                 uint64 // outer sizes of records fully consumed by reads
	PaddingBytesWritten       uint64 // padding records made at the end of a deletion
	PaddingBytesCleared       uint64 // padding (incl. erased records) met while deleting
	ChunksWritten             uint64 // records written (new or relocated)
	ChunksRewritten           uint64 // in-place recommits that grew a record
	ChunksRelocated           uint64 // recommits moved to the write cursor
	ChunksOverwritten         uint64 // records evicted with unread data
	ChunksDiscarded           uint64 // DISCARD drops and stale recommits
	ChunksRead                uint64 // records fully consumed by reads
	ChunksCommittedOutOfOrder uint64 // records inserted before their sequence's tail
	WriteWrapCount            uint64 // wraps of the write cursor
	PatchesSucceeded          uint64 // 4-byte patches applied
	PatchesFailed             uint64 // failed patch calls
	ReadaheadsSucceeded       uint64 // fragmented packets reassembled
	ReadaheadsFailed          uint64 // reassemblies ending in loss or missing data
	AbiViolations             uint64 // malformed chunks or recommits
	TraceWriterPacketLoss     uint64 // chunks carrying the writer's drop sentinel
}

// StatField is one BufferStats field: its proto name, field number and
// value.
type StatField struct {
	Name   string
	Number int
	Value  uint64
}

// Fields lists every statistic in BufferStats field-number order.
func (s Stats) Fields() []StatField {
	return []StatField{
		{"bytes_written", 1, s.BytesWritten},
		{"chunks_written", 2, s.ChunksWritten},
		{"chunks_overwritten", 3, s.ChunksOverwritten},
		{"write_wrap_count", 4, s.WriteWrapCount},
		{"patches_succeeded", 5, s.PatchesSucceeded},
		{"patches_failed", 6, s.PatchesFailed},
		{"readaheads_succeeded", 7, s.ReadaheadsSucceeded},
		{"readaheads_failed", 8, s.ReadaheadsFailed},
		{"abi_violations", 9, s.AbiViolations},
		{"chunks_rewritten", 10, s.ChunksRewritten},
		{"chunks_committed_out_of_order", 11, s.ChunksCommittedOutOfOrder},
		{"buffer_size", 12, s.BufferSize},
		{"bytes_overwritten", 13, s.BytesOverwritten},
		{"bytes_read", 14, s.BytesRead},
		{"padding_bytes_written", 15, s.PaddingBytesWritten},
		{"padding_bytes_cleared", 16, s.PaddingBytesCleared},
		{"chunks_read", 17, s.ChunksRead},
		{"chunks_discarded", 18, s.ChunksDiscarded},
		{"trace_writer_packet_loss", 19, s.TraceWriterPacketLoss},
		{"chunks_relocated", 20, s.ChunksRelocated},
	}
}

// Stats returns a copy of the buffer's counters.
func (b *TraceBuffer) Stats() Stats { return b.stats }

// HistogramBounds are the inclusive upper bounds of the chunk payload
// histogram buckets (TraceStats.chunk_payload_histogram_def); a last,
// unbounded bucket follows.
var HistogramBounds = [...]uint64{8, 32, 128, 512, 1024, 2048, 4096, 8192, 12288, 16384}

// NumHistogramBuckets is len(HistogramBounds) plus the overflow bucket.
const NumHistogramBuckets = len(HistogramBounds) + 1

// histogram keeps each bucket's count beside its sum, so adding a chunk
// touches one cache line (the histogram of a writer in a large round robin
// is out of cache when its next chunk comes).
type histogram struct {
	buckets [NumHistogramBuckets]struct {
		count uint64
		sum   int64
	}
}

func (h *histogram) add(v int) {
	i := 0
	for i < len(HistogramBounds) && uint64(v) > HistogramBounds[i] {
		i++
	}
	h.buckets[i].count++
	h.buckets[i].sum += int64(v)
}

// WriterStat is the chunk payload histogram of one (producer, writer)
// sequence (TraceStats.WriterStats): the count and sum of valid fragment
// bytes of every chunk copied, per bucket of HistogramBounds.
type WriterStat struct {
	ProducerID uint16
	WriterID   uint16
	Counts     [NumHistogramBuckets]uint64
	Sums       [NumHistogramBuckets]int64
}

// WriterStats returns the per-writer histograms sorted by (producer,
// writer). Clones have none.
func (b *TraceBuffer) WriterStats() []WriterStat {
	keys := make([]uint32, 0, len(b.writerHist))
	for k := range b.writerHist {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	out := make([]WriterStat, len(keys))
	for i, k := range keys {
		h := b.writerHist[k]
		out[i] = WriterStat{ProducerID: uint16(k >> 16), WriterID: uint16(k)}
		for j, bk := range h.buckets {
			out[i].Counts[j], out[i].Sums[j] = bk.count, bk.sum
		}
	}
	return out
}
