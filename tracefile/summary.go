package tracefile

import (
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/tracepipe/tracepipe/internal/distinct"
)

// DefaultSummaryPackets is how many leading packets [Summarize] renders.
const DefaultSummaryPackets = 10

// SummaryOptions tunes [SummarizeOptions].
type SummaryOptions struct {
	FirstN        int // packets to render as text (0 → DefaultSummaryPackets, < 0 → none)
	MaxRecordSize int // as ReaderOptions.MaxRecordSize
	// SkipService leaves the service's own packets (sequence 1: clock
	// snapshots, trace_config, system_info, TraceStats, ...) out of the
	// packets rendered as text, so that they show the data.
	SkipService bool
	// Stats makes WriteText print the last TraceStats' whole loss table;
	// without it, one line sums it up (`tracepipe stats` prints the table).
	Stats bool
	// MaxSequences bounds the sequences summarised one by one; the packets
	// of further sequences are added to one row (SequenceSummary.Summarised).
	// 0 → DefaultSummarySequences.
	MaxSequences int
	// MaxPacketBuffer is ReaderOptions.MaxPacketBuffer: the most held of
	// one packet (0 → DefaultMaxPacketBuffer, < 0 → packets read whole).
	MaxPacketBuffer int
}

// DefaultSummarySequences is SummaryOptions.MaxSequences' default.
const DefaultSummarySequences = 100_000

// DefaultMaxPacketBuffer is the packet buffer the trace-reading commands
// use by default (16 MiB): fields of a longer packet that do not fit are
// skipped unread (ReaderOptions.MaxPacketBuffer).
const DefaultMaxPacketBuffer = 16 << 20

// SummarisedSequenceID is the ID of the row standing for the sequences
// beyond SummaryOptions.MaxSequences.
const SummarisedSequenceID = ^uint32(0)

// SequenceSummary describes the packets of one trusted_packet_sequence_id
// (0 = packets without one).
type SequenceSummary struct {
	ID                    uint32
	Packets               int
	Bytes                 int64 // packet bytes, framing excluded
	MinTimestamp          uint64
	MaxTimestamp          uint64
	HasTimestamps         bool
	PreviousPacketDropped int // packets with a non-zero loss bitmask
	LossBits              uint32
	// Summarised marks the row (ID SummarisedSequenceID) that adds up the
	// sequences beyond SummaryOptions.MaxSequences.
	Summarised bool
}

// PacketText is one rendered packet.
type PacketText struct {
	Index  int // the packet's position in the file, from 0
	Offset int64
	Text   string
}

// Summary is what `tracepipe inspect` shows about a trace file.
type Summary struct {
	Compression Compression
	Packets     int
	Bytes       int64 // packet bytes, framing excluded
	StreamBytes int64 // bytes of the (decompressed) Trace stream read
	// MinTimestamp/MaxTimestamp span every packet's timestamp field as
	// written, whatever its clock.
	MinTimestamp  uint64
	MaxTimestamp  uint64
	HasTimestamps bool
	// PreviousPacketDropped counts packets with a non-zero loss bitmask.
	PreviousPacketDropped int
	Sequences             []SequenceSummary // ordered by ID
	Kinds                 map[string]int    // packets per payload kind ("" = none)
	BadPackets            int               // records whose TracePacket did not parse
	SkippedFields         int               // top-level fields other than Trace.packet
	TraceStatsPackets     int
	LastTraceStats        *TraceStats // nil when the file has none (or none parsed)
	// LossContext comes from the first trace_config packet; it tells
	// ring overwrites from losses in the loss line.
	LossContext LossContext
	First       []PacketText
	// FirstSkipped counts service packets SkipService left out before the
	// last packet rendered.
	FirstSkipped int
	// opts are the options the summary was made with (WriteText reads
	// Stats).
	opts SummaryOptions
	// MaxSequences is the bound the summary was made with;
	// SummarisedSequences estimates (within a few percent) how many
	// sequences beyond it were added up in the Summarised row.
	MaxSequences        int
	SummarisedSequences int64
	// ElidedPackets were longer than the packet buffer; ElidedBytes of
	// their fields were skipped unread (counted in Bytes, not decoded).
	ElidedPackets int
	ElidedBytes   int64
	// Truncated is set when the input ends inside a record (TruncatedErr
	// says where); everything before it was summarised.
	Truncated    bool
	TruncatedErr error
}

// Summarize reads a whole trace (gzip/zstd detected) with default options.
func Summarize(r io.Reader) (*Summary, error) { return SummarizeOptions(r, SummaryOptions{}) }

// SummarizeOptions reads a whole trace and summarises it. A truncated final
// record is not an error (Summary.Truncated reports it); any other reader
// error is returned together with the summary of what came before it.
func SummarizeOptions(r io.Reader, opts SummaryOptions) (*Summary, error) {
	firstN := opts.FirstN
	if firstN == 0 {
		firstN = DefaultSummaryPackets
	}
	keep := opts.MaxPacketBuffer
	if keep == 0 {
		keep = DefaultMaxPacketBuffer
	}
	maxSeqs := opts.MaxSequences
	if maxSeqs <= 0 {
		maxSeqs = DefaultSummarySequences
	}
	rd, err := NewReaderOptions(r, ReaderOptions{MaxRecordSize: opts.MaxRecordSize, MaxPacketBuffer: max(keep, 0)})
	if err != nil {
		if errors.Is(err, ErrTruncated) {
			return &Summary{Kinds: map[string]int{}, Truncated: true, TruncatedErr: err, MaxSequences: maxSeqs}, nil
		}
		return nil, err
	}
	defer rd.Close()
	s := &Summary{Compression: rd.Compression(), Kinds: map[string]int{}, opts: opts, MaxSequences: maxSeqs}
	seqs := &seqTable{byID: map[uint32]*SequenceSummary{}, max: maxSeqs}
	defer func() {
		s.StreamBytes = rd.Offset()
		s.SkippedFields = rd.SkippedFields()
		for _, q := range seqs.byID {
			s.Sequences = append(s.Sequences, *q)
		}
		if seqs.beyond.Packets > 0 {
			s.Sequences = append(s.Sequences, seqs.beyond)
			s.SummarisedSequences = int64(max(seqs.beyondIDs.Estimate(), 1))
		}
		sort.Slice(s.Sequences, func(i, j int) bool { return s.Sequences[i].ID < s.Sequences[j].ID })
	}()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return s, nil
		}
		if errors.Is(err, ErrTruncated) {
			s.Truncated, s.TruncatedErr = true, err
			return s, nil
		}
		if err != nil {
			return s, err
		}
		s.add(rec, seqs, firstN)
	}
}

// seqTable holds the per-sequence rows, at most max of them; the packets
// of further sequences go to beyond, and beyondIDs estimates how many
// sequences those were.
type seqTable struct {
	byID      map[uint32]*SequenceSummary
	max       int
	beyond    SequenceSummary
	beyondIDs *distinct.Counter // allocated with the summary row
}

func (t *seqTable) row(id uint32) *SequenceSummary {
	if q := t.byID[id]; q != nil {
		return q
	}
	if len(t.byID) >= t.max {
		if t.beyondIDs == nil {
			t.beyondIDs = new(distinct.Counter)
		}
		t.beyondIDs.Add(uint64(id))
		t.beyond.ID, t.beyond.Summarised = SummarisedSequenceID, true
		return &t.beyond
	}
	q := &SequenceSummary{ID: id}
	t.byID[id] = q
	return q
}

func (s *Summary) add(rec Record, seqs *seqTable, firstN int) {
	s.Packets++
	size := int64(max(rec.Size, len(rec.Packet)))
	s.Bytes += size
	if rec.Elided > 0 {
		s.ElidedPackets++
		s.ElidedBytes += rec.Elided
	}
	info, err := DecodePacket(rec.Packet)
	if len(s.First) < firstN {
		if s.opts.SkipService && err == nil && info.SequenceID == serviceSequenceID {
			s.FirstSkipped++
		} else {
			text := DumpPacket(rec.Packet)
			if rec.Elided > 0 {
				text += fmt.Sprintf("(%d bytes in %d field(s) skipped unread: the packet is longer than the packet buffer; an empty field stands for each)\n", rec.Elided, rec.ElidedFields)
			}
			s.First = append(s.First, PacketText{Index: s.Packets - 1, Offset: rec.Offset, Text: text})
		}
	}
	if err != nil {
		s.BadPackets++
		return
	}
	if info.PayloadField == FieldTraceConfig && !s.LossContext.Known {
		if c, err := DecodeLossContext(info.Payload); err == nil {
			s.LossContext = c
		}
	}
	s.Kinds[info.Kind()]++
	q := seqs.row(info.SequenceID)
	q.Packets++
	q.Bytes += size
	if info.HasTimestamp {
		widen(&q.MinTimestamp, &q.MaxTimestamp, &q.HasTimestamps, info.Timestamp)
		widen(&s.MinTimestamp, &s.MaxTimestamp, &s.HasTimestamps, info.Timestamp)
	}
	if info.PreviousPacketDropped != 0 {
		q.PreviousPacketDropped++
		q.LossBits |= info.PreviousPacketDropped
		s.PreviousPacketDropped++
	}
	if info.PayloadField == FieldTraceStats {
		s.TraceStatsPackets++
		if rec.Elided > 0 && len(info.Payload) == 0 {
			s.BadPackets++ // its stats were skipped unread: never shown as zeros
		} else if ts, err := DecodeTraceStats(info.Payload); err == nil {
			s.LastTraceStats = &ts
		} else {
			s.BadPackets++
		}
	}
}

func widen(lo, hi *uint64, has *bool, v uint64) {
	if !*has || v < *lo {
		*lo = v
	}
	if !*has || v > *hi {
		*hi = v
	}
	*has = true
}

// String is a one-line description, for logs.
func (s *Summary) String() string {
	return fmt.Sprintf("%d packets, %d bytes, %d sequences, %d with previous_packet_dropped", s.Packets, s.Bytes, len(s.Sequences), s.PreviousPacketDropped)
}
