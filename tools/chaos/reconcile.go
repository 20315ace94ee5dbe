package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/tracepipe/tracepipe/plugins/builtin"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// seqKey names a sequence: its trusted sequence id and the source kind
// ("synthetic" for in-process and plugin writers, "perfetto" for the
// double), as ids are only unique within one output.
type seqKey struct {
	id   uint32
	kind string
}

// seqData is what one output holds of one sequence: how often each packet
// index appears, and which indices arrived flagged previous_packet_dropped
// (the service saw the loss before them and counted it).
type seqData struct {
	count   []uint32        // count[i]: copies of packet i
	flagged map[uint64]bool // packets carrying previous_packet_dropped
	first   bool            // the first packet read came flagged first_packet_on_sequence
}

func (s *seqData) add(i uint64, dropped bool) error {
	if i > 1<<28 {
		return fmt.Errorf("packet index %d beyond any plausible run", i)
	}
	for uint64(len(s.count)) <= i {
		s.count = append(s.count, 0)
	}
	s.count[i]++
	if dropped {
		if s.flagged == nil {
			s.flagged = map[uint64]bool{}
		}
		s.flagged[i] = true
	}
	return nil
}

// output is one sink's copy: its sequences and the last TraceStats read
// (counters are session-wide for the sink, so the last one holds them all).
type output struct {
	name     string
	files    []string
	seqs     map[seqKey]*seqData
	stats    tracefile.TraceStats
	hasStats bool
	packets  int
	readErrs []string
	// only, when set, is the one source kind a copy's filter keeps:
	// the reference's other sequences are not expected in it.
	only string
}

// readOutput reads files in order.
func readOutput(name string, files []string) *output {
	o := &output{name: name, files: files, seqs: map[seqKey]*seqData{}}
	for _, f := range files {
		if err := o.readFile(f); err != nil {
			o.readErrs = append(o.readErrs, fmt.Sprintf("%s: %v", filepath.Base(f), err))
		}
	}
	return o
}

func (o *output) readFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := tracefile.NewReader(f)
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		o.packets++
		info, err := tracefile.DecodePacket(rec.Packet)
		if err != nil {
			return fmt.Errorf("packet %d: %w", o.packets, err)
		}
		if info.PayloadField == tracefile.FieldTraceStats {
			if ts, ok, err := tracefile.DecodeTraceStatsPacket(rec.Packet); err == nil && ok {
				o.stats, o.hasStats = ts, true
			}
			continue
		}
		var key seqKey
		var i uint64
		if v, ok := builtin.SyntheticSeq(rec.Packet); ok {
			key, i = seqKey{info.SequenceID, "synthetic"}, v
		} else if v, ok := perfettoCounter(rec.Packet); ok {
			key, i = seqKey{info.SequenceID, "perfetto"}, v
		} else {
			continue
		}
		s := o.seqs[key]
		if s == nil {
			s = &seqData{first: info.FirstPacketOnSequence}
			o.seqs[key] = s
		}
		if err := s.add(i, info.PreviousPacketDropped != 0); err != nil {
			return fmt.Errorf("sequence %d: %w", key.id, err)
		}
	}
}

// seqFigures is one CSV row: one sequence in one output.
type seqFigures struct {
	output     string
	key        seqKey
	emitted    uint64 // reference: highest index + 1 (the writer's own count for the Perfetto double); copies: the reference's delivered
	delivered  uint64 // distinct packets found
	duplicates uint64 // copies beyond the first
	counted    uint64 // missing, behind a packet flagged previous_packet_dropped (reference) or within the sink's drop counter (copies)
	unexplain  uint64 // missing and not counted, plus duplicates
}

// reconcileReference checks the reference output alone: per sequence,
// every index from 0 to the highest seen appears exactly once; a gap is
// counted when the packet after it carries previous_packet_dropped (the
// service noticed and counted the loss), unexplained otherwise.
// perfettoEmitted, when > 0, is what the double wrote: its tail must be
// there too.
func reconcileReference(o *output, perfettoEmitted uint64) []seqFigures {
	var rows []seqFigures
	for _, k := range sortedKeys(o.seqs) {
		s := o.seqs[k]
		r := seqFigures{output: o.name, key: k, emitted: uint64(len(s.count))}
		gap := uint64(0)
		for i, c := range s.count {
			switch {
			case c == 0:
				gap++
			default:
				r.delivered++
				r.duplicates += uint64(c - 1)
				if gap > 0 {
					if s.flagged[uint64(i)] {
						r.counted += gap
					} else {
						r.unexplain += gap
					}
					gap = 0
				}
			}
		}
		r.unexplain += r.duplicates
		rows = append(rows, r)
	}
	if perfettoEmitted > 0 {
		// The double's single sequence: what it wrote beyond the
		// highest index found is a tail loss nothing flags.
		var found uint64
		var last *seqFigures
		for i := range rows {
			if rows[i].key.kind == "perfetto" {
				found += rows[i].emitted
				last = &rows[i]
			}
		}
		if last != nil && perfettoEmitted > found {
			last.emitted += perfettoEmitted - found
			last.unexplain += perfettoEmitted - found
		}
	}
	return rows
}

// reconcileCopy compares a sink's copy with the reference: packets the
// reference holds and the copy lacks are counted up to the copy's own
// sink_packets_dropped (its last TraceStats), unexplained beyond it;
// duplicates and packets the reference lacks are unexplained.
func reconcileCopy(ref, cp *output) ([]seqFigures, uint64) {
	var rows []seqFigures
	var missing uint64
	for _, k := range sortedKeys(ref.seqs) {
		if cp.only != "" && k.kind != cp.only {
			continue
		}
		rs, cs := ref.seqs[k], cp.seqs[k]
		r := seqFigures{output: cp.name, key: k}
		for i, c := range rs.count {
			if c == 0 {
				continue
			}
			r.emitted++
			if cs != nil && i < len(cs.count) && cs.count[i] > 0 {
				r.delivered++
				r.duplicates += uint64(cs.count[i] - 1)
			} else {
				missing++
				r.counted++ // provisionally: settled against the drop counter below
			}
		}
		if cs != nil {
			for i := len(rs.count); i < len(cs.count); i++ {
				if cs.count[i] > 0 {
					r.unexplain += uint64(cs.count[i]) // in the copy only
				}
			}
			for i := range min(len(rs.count), len(cs.count)) {
				if rs.count[i] == 0 && cs.count[i] > 0 {
					r.unexplain += uint64(cs.count[i])
				}
			}
		}
		r.unexplain += r.duplicates
		rows = append(rows, r)
	}
	for _, k := range sortedKeys(cp.seqs) {
		if _, ok := ref.seqs[k]; !ok {
			var n uint64
			for _, c := range cp.seqs[k].count {
				n += uint64(c)
			}
			rows = append(rows, seqFigures{output: cp.name, key: k, delivered: n, unexplain: n})
		}
	}
	var dropped uint64
	if cp.stats.Tracepipe != nil {
		dropped = cp.stats.Tracepipe.SinkPacketsDropped
	}
	// Settle: the missing packets beyond the sink's drop counter are
	// unexplained (taken from the last rows first).
	if missing > dropped {
		excess := missing - dropped
		for i := len(rows) - 1; i >= 0 && excess > 0; i-- {
			n := min(rows[i].counted, excess)
			rows[i].counted -= n
			rows[i].unexplain += n
			excess -= n
		}
	}
	return rows, dropped
}

func sortedKeys(m map[seqKey]*seqData) []seqKey {
	ks := make([]seqKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].kind != ks[j].kind {
			return ks[i].kind < ks[j].kind
		}
		return ks[i].id < ks[j].id
	})
	return ks
}

// totals sums rows.
func totals(rows []seqFigures) (emitted, delivered, counted, unexplained uint64) {
	for _, r := range rows {
		emitted += r.emitted
		delivered += r.delivered
		counted += r.counted
		unexplained += r.unexplain
	}
	return
}

// lossCauses lists the non-zero data-loss counters of a TraceStats as
// "name=value" (per-buffer ones with their index).
func lossCauses(o *output) string {
	if !o.hasStats {
		return "no TraceStats"
	}
	var parts []string
	for _, r := range tracefile.LossReport(o.stats) {
		if r.Lost() {
			n := r.Name
			if r.Index >= 0 {
				n += "[" + strconv.Itoa(r.Index) + "]"
			}
			parts = append(parts, fmt.Sprintf("%s=%d", n, r.Value))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// traceFiles lists a file sink's files in rotation order, named as the
// sink names them (sinks.FileName: ref.pftrace, ref.1.pftrace, ...;
// snapshots, named <stem>.snap-N-..., are not part of it).
func traceFiles(path string) []string {
	var out []string
	if _, err := os.Stat(path); err == nil {
		out = append(out, path)
	}
	for i := 1; ; i++ {
		p := sinks.FileName(path, i)
		if _, err := os.Stat(p); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return out
			}
			continue
		}
		out = append(out, p)
	}
}

// servedFiles lists the live (non-snapshot) traces serve stored in dir.
func servedFiles(dir string) []string {
	names, _ := filepath.Glob(filepath.Join(dir, "*.pftrace*"))
	var out []string
	for _, n := range names {
		b := filepath.Base(n)
		if strings.Contains(b, ".snap-") || strings.HasSuffix(b, ".state") {
			continue
		}
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
