package tpimport

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Severities of trace_processor stats (src/trace_processor/storage/stats.h)
// and of findings. A Finding's Severity is the severity of the stat it
// stands for, or SeverityCheck for a problem trace_processor reports
// without a stat (a replaced event, a track without descriptor, a strict
// decoding failure, ...).
const (
	SeverityInfo     = "info"
	SeverityNotice   = "notice"
	SeverityError    = "error"
	SeverityDataLoss = "data_loss"
	SeverityFatal    = "fatal" // trace_processor refuses the trace
	SeverityCheck    = "check" // no stat, but the import is not what the writer meant
)

// Finding codes that are not trace_processor stat names.
const (
	CodeUnresolvedIID          = "unresolved_iid"                           // an iid lookup misses (stat interned_data_tokenizer_errors, info)
	CodeReplacedPayload        = "protovm_replaced_payload"                 // a ProtoVM returned Ok for a packet with payload: TP replaces it by the VM state
	CodeProtoVMInvalid         = "protovm_invalid_program"                  // a protovms instance whose program does not load
	CodeTrackNoDescriptor      = "track_without_descriptor"                 // slices on a uuid no descriptor ever names
	CodeNoClockSnapshot        = "missing_clock_snapshot"                   // no clock_snapshot at all
	CodeTimestampsOutside      = "timestamps_outside_session"               // producer timestamps far from the service's clock range
	CodeStrictDecode           = "strict_decode"                            // a payload strict protobuf decoders reject
	CodeMalformedPacket        = "malformed_packet"                         // a TracePacket whose top level does not parse
	CodeTruncated              = "truncated_file"                           // the file ends inside a packet
	CodeNotModelled            = "not_modelled"                             // the trace uses something check does not predict
	CodeSequencesSummarised    = "sequences_summarised"                     // sequences beyond Options.MaxSequences, checked with less state
	CodeEmptyTrace             = "empty_trace"                              // no packet at all: nothing to import
	CodePacketFieldsSkipped    = "packet_fields_skipped"                    // fields of packets beyond Options.MaxPacketBuffer, skipped unread
	CodeNeedsOnSequenceZero    = "needs_incremental_state_on_sequence_zero" // fatal in trace_processor
	CodeSeqClockOnSequenceZero = "sequence_clock_on_sequence_zero"          // fatal in trace_processor
)

// Stat is one predicted row of trace_processor's stats table.
type Stat struct {
	Name     string `json:"name"`
	Index    int    `json:"index"` // buffer index for indexed stats, -1 otherwise
	Severity string `json:"severity"`
	Value    int64  `json:"value"`
}

// Finding is one problem: what trace_processor will do, where, how often.
type Finding struct {
	Code     string `json:"code"`
	Severity string `json:"severity"`
	// Sequence is the trusted_packet_sequence_id concerned (0: the trace
	// as a whole or packets without one); Machine its machine_id.
	Sequence uint32 `json:"sequence"`
	Machine  uint32 `json:"machine,omitempty"`
	Index    int    `json:"index"` // buffer index for indexed stats, else -1
	Count    int64  `json:"count"`
	// Offset is the byte offset (in the decompressed stream) of the first
	// packet concerned, -1 when the finding is about the whole trace.
	Offset  int64  `json:"offset"`
	Message string `json:"message"`
}

// SequenceReport is what happened to one sequence's packets.
type SequenceReport struct {
	ID      uint32 `json:"id"`
	Machine uint32 `json:"machine,omitempty"`
	Packets int64  `json:"packets"` // packets in the file
	// Imported packets reached trace_processor's sorter intact (not skipped,
	// not replaced, not dropped by a tokenizer). Service packets consumed at
	// tokenization (clock snapshots, service events) are not counted.
	Imported        int64            `json:"imported"`
	Replaced        int64            `json:"replaced"` // replaced by ProtoVM state
	NeedsTotal      int64            `json:"needs_incremental_state_total"`
	NeedsSkipped    int64            `json:"needs_incremental_state_skipped"`
	InternedSkipped int64            `json:"interned_data_skipped"`
	Dropped         int64            `json:"dropped"` // dropped by a tokenizer (counter, timestamp, clock)
	PacketLoss      int64            `json:"previous_packet_dropped_count"`
	LossCauses      map[string]int64 `json:"loss_causes,omitempty"`
	Unresolved      map[string]int64 `json:"unresolved_iids,omitempty"` // per InternedData field
	VMs             int              `json:"protovms,omitempty"`
	// Summarised marks the row that stands for the sequences of its machine
	// beyond the tracked ones (Report.SummarisedSequences); its ID is
	// 4294967295.
	Summarised bool `json:"summarised,omitempty"`
}

// PatchStats sums the ProtoVM outcomes of the VMs trace_processor runs.
type PatchStats struct {
	Instances  int    `json:"instances"`
	Ok         uint64 `json:"ok"`
	Error      uint64 `json:"error"`
	Abort      uint64 `json:"abort"`
	StateBytes int    `json:"state_bytes"` // serialised state of every VM at the end
}

// Report is the prediction for one trace.
type Report struct {
	File        string `json:"file,omitempty"`
	Compression string `json:"compression"`
	Packets     int64  `json:"packets"`
	Bytes       int64  `json:"bytes"`
	// Imported packets over every sequence (see SequenceReport.Imported).
	Imported int64 `json:"imported"`
	// ProducerPackets / ProducerImported: the same over producer sequences
	// (ids > 1: 1 is the service's, 0 means no sequence id).
	ProducerPackets  int64  `json:"producer_packets"`
	ProducerImported int64  `json:"producer_imported"`
	Truncated        bool   `json:"truncated"`
	Fatal            string `json:"fatal,omitempty"`
	// Unreadable is why the file stopped being a trace part way (a
	// malformed record, a read error): the packets after it were not
	// checked, so the report cannot say the trace is clean.
	Unreadable     string           `json:"unreadable,omitempty"`
	ClockSnapshots int              `json:"clock_snapshots"`
	TraceClock     uint32           `json:"trace_clock,omitempty"`
	ProtoVM        PatchStats       `json:"protovm"`
	Sequences      []SequenceReport `json:"sequences"`
	Stats          []Stat           `json:"stats"`
	Findings       []Finding        `json:"findings"`
	// MaxSequences is how many sequences were tracked one by one;
	// SummarisedSequences estimates (within a few percent) how many more
	// there were, whose SummarisedPackets were checked with less state.
	MaxSequences        int   `json:"max_sequences"`
	SummarisedSequences int64 `json:"summarised_sequences,omitempty"`
	SummarisedPackets   int64 `json:"summarised_packets,omitempty"`
	// ElidedPackets were longer than the packet buffer: ElidedBytes of
	// their fields were skipped unread and not checked.
	ElidedPackets int64 `json:"elided_packets,omitempty"`
	ElidedBytes   int64 `json:"elided_bytes,omitempty"`
}

// Clean reports whether trace_processor will import the trace as written:
// no findings, and the whole file was read.
func (r *Report) Clean() bool { return len(r.Findings) == 0 && r.Unreadable == "" }

// StatValue returns the predicted value of stat name at index (-1 for a
// non-indexed stat), 0 when it is not raised.
func (r *Report) StatValue(name string, index int) int64 {
	for _, s := range r.Stats {
		if s.Name == name && s.Index == index {
			return s.Value
		}
	}
	return 0
}

// Codes returns the distinct finding codes, sorted.
func (r *Report) Codes() []string {
	var out []string
	for _, f := range r.Findings {
		if !slices.Contains(out, f.Code) {
			out = append(out, f.Code)
		}
	}
	sort.Strings(out)
	return out
}

// Sequence returns the report of sequence id on machine 0, or nil.
func (r *Report) Sequence(id uint32) *SequenceReport {
	for i := range r.Sequences {
		if r.Sequences[i].ID == id && r.Sequences[i].Machine == 0 {
			return &r.Sequences[i]
		}
	}
	return nil
}

// WriteText renders the report for a terminal.
func (r *Report) WriteText(w io.Writer) error {
	name := r.File
	if name == "" {
		name = "trace"
	}
	verdict := "clean"
	switch {
	case r.Unreadable != "":
		verdict = fmt.Sprintf("%d problem(s) in the %d packet(s) before an unreadable record; the rest was not checked: %s", len(r.Findings), r.Packets, r.Unreadable)
	case !r.Clean():
		verdict = fmt.Sprintf("%d problem(s)", len(r.Findings))
	}
	fmt.Fprintf(w, "%s: %s\n", name, verdict)
	fmt.Fprintf(w, "  packets %d (%d bytes, %s), imported %d; producer packets %d, imported %d (%s)\n",
		r.Packets, r.Bytes, r.Compression, r.Imported, r.ProducerPackets, r.ProducerImported, percent(r.ProducerImported, r.ProducerPackets))
	if r.ProtoVM.Instances > 0 {
		fmt.Fprintf(w, "  protovm: %d instance(s), patches ok %d, error %d, abort %d, state %d bytes\n",
			r.ProtoVM.Instances, r.ProtoVM.Ok, r.ProtoVM.Error, r.ProtoVM.Abort, r.ProtoVM.StateBytes)
	}
	if r.Fatal != "" {
		fmt.Fprintf(w, "  FATAL: trace_processor refuses the trace: %s\n", r.Fatal)
	}
	if len(r.Sequences) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  SEQ\tPACKETS\tIMPORTED\tSKIPPED\tREPLACED\tDROPPED\tLOSS\tUNRESOLVED")
		for _, s := range r.Sequences {
			id := strconv.FormatUint(uint64(s.ID), 10)
			if s.Summarised {
				id = "others"
			}
			if s.Machine != 0 {
				id += "@m" + strconv.FormatUint(uint64(s.Machine), 10)
			}
			var unres int64
			for _, v := range s.Unresolved {
				unres += v
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", id, s.Packets, s.Imported, s.NeedsSkipped, s.Replaced, s.Dropped, s.PacketLoss, unres)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, f := range r.Findings {
		where := "trace"
		if f.Sequence != 0 || f.Machine != 0 {
			where = "seq " + strconv.FormatUint(uint64(f.Sequence), 10)
		}
		if f.Sequence == beyondSeq {
			where = "summarised sequences"
		}
		if f.Index >= 0 {
			where += " buffer " + strconv.Itoa(f.Index)
		}
		at := ""
		if f.Offset >= 0 {
			at = " (first at offset " + strconv.FormatInt(f.Offset, 10) + ")"
		}
		fmt.Fprintf(w, "  %-9s %s [%s] ×%d: %s%s\n", f.Severity, f.Code, where, f.Count, f.Message, at)
	}
	var raised []string
	for _, s := range r.Stats {
		if s.Value != 0 && s.Severity != SeverityInfo {
			n := s.Name
			if s.Index >= 0 {
				n += "[" + strconv.Itoa(s.Index) + "]"
			}
			raised = append(raised, fmt.Sprintf("%s=%d", n, s.Value))
		}
	}
	if len(raised) > 0 {
		_, err := fmt.Fprintf(w, "  stats (notice/error/data_loss): %s\n", strings.Join(raised, " "))
		return err
	}
	return nil
}

func percent(a, b int64) string {
	if b == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(a)/float64(b), 'f', 1, 64) + "%"
}

func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Code, b.Code), cmp.Compare(a.Machine, b.Machine),
			cmp.Compare(a.Sequence, b.Sequence), cmp.Compare(a.Index, b.Index))
	})
}

func packetFieldName(num int32) string { return tracefile.PacketFieldName(num) }
