package tracefile

import (
	"errors"
	"fmt"
	"io"
	"sort"
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
}

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
	rd, err := NewReaderOptions(r, ReaderOptions{MaxRecordSize: opts.MaxRecordSize})
	if err != nil {
		if errors.Is(err, ErrTruncated) {
			return &Summary{Kinds: map[string]int{}, Truncated: true, TruncatedErr: err}, nil
		}
		return nil, err
	}
	defer rd.Close()
	s := &Summary{Compression: rd.Compression(), Kinds: map[string]int{}, opts: opts}
	seqs := map[uint32]*SequenceSummary{}
	defer func() {
		s.StreamBytes = rd.Offset()
		s.SkippedFields = rd.SkippedFields()
		for _, q := range seqs {
			s.Sequences = append(s.Sequences, *q)
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

func (s *Summary) add(rec Record, seqs map[uint32]*SequenceSummary, firstN int) {
	s.Packets++
	s.Bytes += int64(len(rec.Packet))
	info, err := DecodePacket(rec.Packet)
	if len(s.First) < firstN {
		if s.opts.SkipService && err == nil && info.SequenceID == serviceSequenceID {
			s.FirstSkipped++
		} else {
			s.First = append(s.First, PacketText{Index: s.Packets - 1, Offset: rec.Offset, Text: DumpPacket(rec.Packet)})
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
	q := seqs[info.SequenceID]
	if q == nil {
		q = &SequenceSummary{ID: info.SequenceID}
		seqs[info.SequenceID] = q
	}
	q.Packets++
	q.Bytes += int64(len(rec.Packet))
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
		if ts, err := DecodeTraceStats(info.Payload); err == nil {
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
