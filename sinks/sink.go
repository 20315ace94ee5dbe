package sinks

import (
	"context"
	"errors"
)

// Sink receives packets after readback.
//
// Contract:
//   - packets are complete TracePacket encodings, already stamped with the
//     trusted fields, without Trace framing. The slices belong to the
//     caller and may be reused as soon as Write returns; a sink that keeps
//     them copies them.
//   - Write never blocks indefinitely: a sink either writes, or drops and
//     counts. Every packet handed to Write ends up in exactly one of
//     SinkStats' written, filtered or dropped counters.
//   - Flush makes everything accepted so far visible to readers of the
//     destination (for a file: handed to the OS); Close flushes, releases
//     resources and is safe to call twice. Write after Close fails and
//     counts the packets as dropped.
//   - All methods are safe for concurrent use; Stats may be called at any
//     time, including after Close.
type Sink interface {
	Write(ctx context.Context, packets [][]byte) error
	Flush(ctx context.Context) error
	Close(ctx context.Context) error
	Stats() SinkStats
}

// ErrClosed is returned by Write and Flush after Close.
var ErrClosed = errors.New("sinks: sink is closed")

// SinkStats counts what a sink did with the packets handed to it. Byte
// counts are packet bytes, Trace framing excluded.
type SinkStats struct {
	PacketsWritten uint64 // accepted into the destination
	BytesWritten   uint64
	// PacketsFiltered/BytesFiltered: rejected by a CEL filter.
	PacketsFiltered uint64
	BytesFiltered   uint64
	// PacketsDroppedQueue/BytesDroppedQueue: refused because a queue was
	// full, or still queued when Close gave up waiting.
	PacketsDroppedQueue uint64
	BytesDroppedQueue   uint64
	// PacketsDroppedError/BytesDroppedError: lost to a write error, a
	// cancelled context or a closed sink.
	PacketsDroppedError uint64
	BytesDroppedError   uint64
	FilesRotated        uint64 // files closed to go on in the next (MaxFileSize, Rotate, a resume)
	FileSyncs           uint64 // fsync calls made
	FilterErrors        uint64 // filter evaluations that failed (the packet was kept)
	Errors              uint64 // failed operations (write, flush, sync, close, open)
	// RestoreOverflows: times a rotating file sink's fold outgrew its
	// bounds, so a sequence started a rotated file without its state.
	RestoreOverflows uint64
	// Reconnects: outages of a network sink's destination that ended, or
	// a file sink's full file system that had room again (info: what an
	// outage lost is in PacketsDroppedError).
	Reconnects uint64
}

// PacketsDropped is every packet that did not reach the destination:
// filtered, dropped by a queue or lost to an error.
func (s SinkStats) PacketsDropped() uint64 {
	return s.PacketsFiltered + s.PacketsDroppedQueue + s.PacketsDroppedError
}

// Add returns the field-wise sum of s and o.
func (s SinkStats) Add(o SinkStats) SinkStats {
	return SinkStats{
		PacketsWritten:      s.PacketsWritten + o.PacketsWritten,
		BytesWritten:        s.BytesWritten + o.BytesWritten,
		PacketsFiltered:     s.PacketsFiltered + o.PacketsFiltered,
		BytesFiltered:       s.BytesFiltered + o.BytesFiltered,
		PacketsDroppedQueue: s.PacketsDroppedQueue + o.PacketsDroppedQueue,
		BytesDroppedQueue:   s.BytesDroppedQueue + o.BytesDroppedQueue,
		PacketsDroppedError: s.PacketsDroppedError + o.PacketsDroppedError,
		BytesDroppedError:   s.BytesDroppedError + o.BytesDroppedError,
		FilesRotated:        s.FilesRotated + o.FilesRotated,
		FileSyncs:           s.FileSyncs + o.FileSyncs,
		FilterErrors:        s.FilterErrors + o.FilterErrors,
		Errors:              s.Errors + o.Errors,
		RestoreOverflows:    s.RestoreOverflows + o.RestoreOverflows,
		Reconnects:          s.Reconnects + o.Reconnects,
	}
}

// countBytes sums the lengths of packets.
func countBytes(packets [][]byte) uint64 {
	var n uint64
	for _, p := range packets {
		n += uint64(len(p))
	}
	return n
}
