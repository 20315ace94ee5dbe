package tracefile

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The stats scan behind `tracepipe stats`: one pass over a trace (or each
// file of a rotated set) that keeps what the loss report needs (the last
// TraceStats packet, or every one; each machine's; the packets flagged
// with previous_packet_dropped) and judges it (StatsScan.LossSummary). It
// prints nothing: the CLI formats a StatsScan as a table or JSON lines.

// StatsScanOptions configures ScanStats.
type StatsScanOptions struct {
	// KeepAll keeps every decoded TraceStats packet in StatsScan.Stats,
	// not only the last.
	KeepAll bool
	// MaxPacketBuffer is the bytes held of one packet (0:
	// DefaultMaxPacketBuffer); see ReaderOptions.MaxPacketBuffer.
	MaxPacketBuffer int
}

// StatsAt is one decoded TraceStats packet and where it was.
type StatsAt struct {
	Offset  int64 // record offset in the (decompressed) Trace stream
	Stats   TraceStats
	Machine uint32 // the packet's machine_id (0: none)
}

// StatsScan is what one pass over a trace learns about its losses.
type StatsScan struct {
	Compression  Compression
	Packets      int
	BadPackets   int       // records whose TracePacket did not parse
	StatsPackets int       // packets carrying trace_stats
	BadStats     int       // of those, how many did not decode
	BadStatsErr  error     // the first such error
	Stats        []StatsAt // every decoded one with KeepAll, else the last
	// Dropped counts, per trusted_packet_sequence_id, the packets flagged
	// with previous_packet_dropped by loss mask.
	Dropped        map[uint32]map[uint32]int
	DroppedPackets int
	Truncated      error // the ErrTruncated error, if the input was cut
	// LossContext, from the first trace_config packet, tells the
	// overwrites of a ring buffer read once from losses (presentation
	// only).
	LossContext LossContext
	// packets longer than the packet buffer, and the bytes of their fields
	// skipped unread
	ElidedPackets int
	ElidedBytes   int64
	// Machines: per machine_id, its packets, last TraceStats and the
	// receiver's sections (statsscan_machines.go). A set merged with Add
	// has none: its loss rows are those of its last TraceStats.
	Machines map[uint32]*MachineStats
}

// ScanStats reads every packet of the trace at path. It returns the scan
// of what was readable together with any reader error other than
// truncation (which is recorded in StatsScan.Truncated); a nil scan means
// nothing could be read (the file did not open or is not a trace).
func ScanStats(path string, opts StatsScanOptions) (*StatsScan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := &StatsScan{Dropped: map[uint32]map[uint32]int{}}
	keep := opts.MaxPacketBuffer
	if keep <= 0 {
		keep = DefaultMaxPacketBuffer
	}
	rd, err := NewReaderOptions(f, ReaderOptions{MaxPacketBuffer: keep})
	if err != nil {
		if errors.Is(err, ErrTruncated) {
			s.Truncated = err
			return s, nil
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer rd.Close()
	s.Compression = rd.Compression()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return s, nil
		}
		if errors.Is(err, ErrTruncated) {
			s.Truncated = err
			return s, nil
		}
		if err != nil {
			return s, fmt.Errorf("%s: %w", path, err)
		}
		s.add(rec, opts.KeepAll)
	}
}

func (s *StatsScan) add(rec Record, keepAll bool) {
	s.Packets++
	if rec.Elided > 0 {
		s.ElidedPackets++
		s.ElidedBytes += rec.Elided
	}
	info, err := DecodePacket(rec.Packet)
	if err != nil {
		s.BadPackets++
		return
	}
	s.machine(info.MachineID).Packets++
	if m := info.PreviousPacketDropped; m != 0 {
		s.DroppedPackets++
		bySeq := s.Dropped[info.SequenceID]
		if bySeq == nil {
			bySeq = map[uint32]int{}
			s.Dropped[info.SequenceID] = bySeq
		}
		bySeq[m]++
	}
	if info.PayloadField == FieldTraceConfig && !s.LossContext.Known {
		s.LossContext, _ = DecodeLossContext(info.Payload)
	}
	if info.PayloadField != FieldTraceStats {
		return
	}
	s.StatsPackets++
	if rec.Elided > 0 && len(info.Payload) == 0 {
		s.BadStats++ // skipped unread: never read as a TraceStats of zeros
		if s.BadStatsErr == nil {
			s.BadStatsErr = fmt.Errorf("TraceStats packet at offset %d: %d bytes, longer than the packet buffer: skipped unread (raise with --max-packet-buffer)", rec.Offset, rec.Size)
		}
		return
	}
	ts, _, err := DecodeTraceStatsPacket(rec.Packet)
	if err != nil {
		s.BadStats++
		if s.BadStatsErr == nil {
			s.BadStatsErr = fmt.Errorf("TraceStats packet at offset %d: %w", rec.Offset, err)
		}
		return
	}
	at := StatsAt{Offset: rec.Offset, Stats: ts, Machine: info.MachineID}
	if sender := s.noteTraceStats(info.MachineID, at); !sender && !keepAll && len(s.Stats) > 0 {
		return // a receiver's section alone: the sender's counters stay the last
	}
	if !keepAll {
		s.Stats = s.Stats[:0]
	}
	s.Stats = append(s.Stats, at)
}

// Add merges the scan of the next file of a rotated set (in
// RotationOrder) into set: packets and flagged packets add up, the last
// file with a TraceStats gives the set's (with keepAll, every file's are
// kept in order), the first trace_config gives the loss context, and a
// truncated file marks the set truncated. Machines are not merged.
func (set *StatsScan) Add(s *StatsScan, keepAll bool) {
	if s.Truncated != nil {
		set.Truncated = s.Truncated
	}
	set.Compression = s.Compression
	if !set.LossContext.Known {
		set.LossContext = s.LossContext
	}
	set.Packets += s.Packets
	set.BadPackets += s.BadPackets
	set.StatsPackets += s.StatsPackets
	set.BadStats += s.BadStats
	if set.BadStatsErr == nil {
		set.BadStatsErr = s.BadStatsErr
	}
	if keepAll {
		set.Stats = append(set.Stats, s.Stats...)
	} else if len(s.Stats) > 0 {
		set.Stats = s.Stats
	}
	for id, m := range s.Dropped {
		if set.Dropped == nil {
			set.Dropped = map[uint32]map[uint32]int{}
		}
		if set.Dropped[id] == nil {
			set.Dropped[id] = map[uint32]int{}
		}
		for mask, n := range m {
			set.Dropped[id][mask] += n
		}
	}
	set.DroppedPackets += s.DroppedPackets
}

// Last returns the last decoded TraceStats packet, or nil.
func (s *StatsScan) Last() *StatsAt {
	if len(s.Stats) == 0 {
		return nil
	}
	return &s.Stats[len(s.Stats)-1]
}

// Sequences returns the ids of the sequences with dropped packets, sorted.
func (s *StatsScan) Sequences() []uint32 {
	return slices.Sorted(maps.Keys(s.Dropped))
}

// Reasons returns the loss masks seen on sequence id, ordered by their
// rendering.
func (s *StatsScan) Reasons(id uint32) []uint32 {
	masks := make([]uint32, 0, len(s.Dropped[id]))
	for m := range s.Dropped[id] {
		masks = append(masks, m)
	}
	sort.Slice(masks, func(i, j int) bool {
		return LossReasonString(masks[i]) < LossReasonString(masks[j])
	})
	return masks
}

// LossSummary names what lost data in the last TraceStats packet and the
// flagged packets, or returns "" when nothing did. Overwrites of a ring
// buffer read once (LossContext) are the ring doing its job, not a loss:
// trace_processor and `check` do not report them either.
func (s *StatsScan) LossSummary() string {
	var parts []string
	if s.MultiMachine() {
		parts = s.machineLoss()
	} else {
		for _, r := range s.LossRows() {
			if s.LossContext.Lost(r) {
				parts = append(parts, fmt.Sprintf("%s %s=%d", r.Scope(), r.Name, r.Value))
			}
		}
		for _, id := range s.MachineIDs() {
			parts = append(parts, s.Machines[id].Gaps()...)
		}
	}
	if s.DroppedPackets > 0 {
		ids := s.Sequences()
		names := make([]string, len(ids))
		for i, id := range ids {
			names[i] = strconv.FormatUint(uint64(id), 10)
		}
		parts = append(parts, fmt.Sprintf("%d packet(s) with previous_packet_dropped (sequence %s)", s.DroppedPackets, strings.Join(names, ", ")))
	}
	return strings.Join(parts, ", ")
}
