package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/tracefile"
)

// traceOut is one trace file and its state.
type traceOut struct {
	name  string
	merge bool
	refs  int // Stream handles open; guarded by Store.mu

	mu        sync.Mutex // guards everything below
	f, state  *os.File   // nil until the first batch (or an existing state)
	off       int64      // the file is valid up to here
	streams   []*streamState
	byKey     map[streamKey]*streamState
	machines  map[uint64]uint32 // merge: machine id → machine_id field
	nextSeqID uint32            // merge: next remapped sequence id
	scratch   []byte
	rbuf      []byte // a receiver packet being built
	stateBuf  []byte
	stateLen  int   // bytes of the state file as last written
	err       error // sticky write error

	sync map[uint32]*machineSync // merge: clock sync per machine_id (clocksync.go)
}

// streamState is what the state file keeps of one stream.
type streamState struct {
	machine    uint64
	session    [16]byte
	hostname   string
	lastSeq    uint64
	machineIdx uint32
	seqs       map[uint32]uint32 // merge: original → remapped sequence id
	order      []uint32          // merge: the keys of seqs in the order they came
	recv       tracefile.ReceiverStats
	lastStats  []byte // the sender's latest TraceStats packet, as it sent it
	pending    []byte // a TraceStats packet of the batch being prepared
	handles    int    // Stream handles on this stream
	registered bool   // in traceOut.streams: stored a batch
	unreported bool   // batches refused since the last receiver packet
}

// maxLastStats bounds the sender TraceStats packet a stream remembers.
const maxLastStats = 1 << 20

// receiverPacketSlack is what the disk budget keeps for a receiver packet.
const receiverPacketSlack = 4 << 10

func (t *traceOut) stream(id Identity) *streamState {
	k := keyOf(id)
	if st := t.byKey[k]; st != nil {
		if st.hostname == "" {
			st.hostname = id.Hostname
		}
		return st
	}
	st := &streamState{machine: id.Machine, session: id.Session, hostname: id.Hostname}
	if t.merge {
		st.seqs = map[uint32]uint32{}
		idx, ok := t.machines[id.Machine]
		if !ok {
			idx = uint32(len(t.machines) + 1)
			t.machines[id.Machine] = idx
		}
		st.machineIdx = idx
	}
	t.byKey[k] = st
	return st
}

// remapMark is how far a stream's remap table went before a batch.
type remapMark struct {
	order     int
	nextSeqID uint32
}

func (ss *streamState) mark(t *traceOut) remapMark {
	return remapMark{len(ss.order), t.nextSeqID}
}

// rollback forgets the sequence ids a refused batch brought.
func (ss *streamState) rollback(t *traceOut, m remapMark) {
	for _, from := range ss.order[m.order:] {
		delete(ss.seqs, from)
	}
	ss.order = ss.order[:m.order]
	t.nextSeqID = m.nextSeqID
	ss.pending = ss.pending[:0]
}

// remap returns the merged file's sequence id for the stream's id: one
// map lookup. A new id beyond max (max < 0: no limit) is refused.
func (ss *streamState) remap(t *traceOut, from uint32, max int) (uint32, error) {
	if to, ok := ss.seqs[from]; ok {
		return to, nil
	}
	if max >= 0 && len(ss.seqs) >= max {
		return 0, fmt.Errorf("%w: the stream already has %d, the limit", ErrTooManySequences, max)
	}
	if t.nextSeqID == ^uint32(0) {
		return 0, fmt.Errorf("%w: the merged file ran out of sequence ids", ErrTooManySequences)
	}
	to := t.nextSeqID
	t.nextSeqID++
	ss.seqs[from] = to
	ss.order = append(ss.order, from)
	return to, nil
}

// prepare returns the bytes to append for a batch: the batch itself, or
// merged, each packet with its sequence id remapped and machine_id set.
// It remembers the batch's last TraceStats packet in ss.pending.
func (t *traceOut) prepare(s *Store, ss *streamState, data []byte) ([]byte, error) {
	ss.pending = ss.pending[:0]
	if t.merge {
		t.scratch = t.scratch[:0]
	}
	err := WalkRecords(data, func(p []byte) error {
		if !t.merge {
			// A per-session file stores the sender's packets as they
			// came (checked for framing only): only its TraceStats is
			// looked for, by a scan that builds no error for a packet
			// that does not parse (a hostile or truncated batch must not
			// cost more than a good one).
			if len(p) <= maxLastStats && isTraceStats(p) {
				ss.pending = append(ss.pending[:0], p...)
			}
			return nil
		}
		// A merged file rewrites each packet, so it refuses what does
		// not parse.
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadBatch, err)
		}
		if info.PayloadField == tracefile.FieldTraceStats && len(p) <= maxLastStats {
			ss.pending = append(ss.pending[:0], p...)
		}
		if info.PayloadField == tracefile.FieldClockSnapshot {
			// A sender's own clock snapshots stay out of a merged file,
			// as a relayed machine has none in traced's two-machine
			// traces: trace_processor (ec5d16b) lost every packet of a
			// machine whose stream carried one
			// (clock_sync_failure_no_path; measured with the real
			// trace_processor). The machine's clocks reach the trace
			// through its remote_clock_sync rounds, whose client clocks
			// trace_processor takes as that machine's snapshots.
			return nil
		}
		id, err := ss.remap(t, info.SequenceID, s.opts.MaxSequences)
		if err != nil {
			return err
		}
		t.scratch = t.appendMerged(t.scratch, ss, p, id)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if t.merge {
		return t.scratch, nil
	}
	return data, nil
}

// appendMerged appends packet p as a record of the merged file: sequence
// id id and the stream's machine_id appended (the last occurrence of a
// field wins).
func (t *traceOut) appendMerged(dst []byte, ss *streamState, p []byte, id uint32) []byte {
	extra := 1 + protowire.SizeVarint(uint64(id)) + 2 + protowire.SizeVarint(uint64(ss.machineIdx))
	dst = tracefile.AppendRecordHeader(dst, len(p)+extra)
	dst = append(dst, p...)
	dst = wire.AppendVarint(dst, tracefile.FieldTrustedSequenceID, uint64(id))
	return wire.AppendVarint(dst, tracefile.FieldMachineID, uint64(ss.machineIdx))
}

// receiverPacket builds ss's receiver packet (as its sender would have
// sent it, before any merge remap): a copy of the sender's latest
// TraceStats packet with the receiver's section added, or a packet with
// only that section.
func receiverPacket(dst []byte, ss *streamState) []byte {
	r := ss.recv
	r.Machine, r.Hostname, r.Session = ss.machine, ss.hostname, ss.session
	r.PacketsStored++ // this packet
	if len(ss.lastStats) > 0 {
		if ts, ok, err := tracefile.DecodeTraceStatsPacket(ss.lastStats); err == nil && ok {
			for it := wire.Fields(ss.lastStats); it.Next(); {
				if f := it.Field(); f.Num != tracefile.FieldTraceStats {
					dst = append(dst, f.Raw(ss.lastStats)...)
				}
			}
			if ts.Tracepipe == nil {
				ts.Tracepipe = &tracefile.TracepipeStats{}
			}
			r.SenderStats = true
			ts.Tracepipe.Receiver = &r
			return tracefile.AppendTraceStats(dst, &ts)
		}
	}
	dst = tracefile.AppendServiceHeader(dst, 0)
	return tracefile.AppendReceiverOnlyTraceStats(dst, &r)
}

// writeReceiverPacket appends ss's receiver packet and saves the state.
func (t *traceOut) writeReceiverPacket(s *Store, ss *streamState, _ []byte) error {
	if err := t.ensureFiles(s); err != nil {
		return err
	}
	pkt := receiverPacket(nil, ss)
	t.rbuf = t.rbuf[:0]
	if t.merge {
		info, err := tracefile.DecodePacket(pkt)
		if err != nil {
			return fmt.Errorf("remote: %s: receiver packet: %w", t.name, err)
		}
		id, _ := ss.remap(t, info.SequenceID, -1)
		t.rbuf = t.appendMerged(t.rbuf, ss, pkt, id)
	} else {
		t.rbuf = tracefile.AppendRecord(t.rbuf, pkt)
	}
	if _, err := t.f.WriteAt(t.rbuf, t.off); err != nil {
		return fmt.Errorf("remote: %s: write: %w", t.name, err)
	}
	t.off += int64(len(t.rbuf))
	s.Stats.DiskBytes.Add(int64(len(t.rbuf)))
	ss.recv.PacketsStored++
	s.Stats.ReceiverPackets.Add(1)
	ss.unreported = false
	return t.saveState(s)
}

// ensureFiles creates the trace file and its state on the first batch; a
// new merged file starts with the host's own packets (clocksync.go).
func (t *traceOut) ensureFiles(s *Store) error {
	if t.f != nil {
		return nil
	}
	if t.err != nil {
		return t.err
	}
	f, err := os.OpenFile(t.name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("remote: %w", err)
	}
	sf, err := os.OpenFile(t.name+".state", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		f.Close()
		return fmt.Errorf("remote: %w", err)
	}
	// No state: whatever the file holds was never recorded as valid.
	if err := f.Truncate(t.off); err != nil {
		f.Close()
		sf.Close()
		return fmt.Errorf("remote: %s: %w", t.name, err)
	}
	t.f, t.state = f, sf
	if t.merge && t.off == 0 {
		return t.writeHostPreamble(s)
	}
	return nil
}

func (t *traceOut) closeLocked(why error) error {
	if t.err == nil {
		t.err = why
	}
	if t.f == nil {
		return nil
	}
	err := errors.Join(t.f.Close(), t.state.Close())
	t.f, t.state = nil, nil
	return err
}

// openTrace opens name if its state file exists, continuing it;
// otherwise it returns a trace whose files the first batch creates.
func openTrace(name string, merge bool) (*traceOut, error) {
	t := &traceOut{name: name, merge: merge, byKey: map[streamKey]*streamState{}, machines: map[uint64]uint32{}, nextSeqID: 2}
	sf, err := os.OpenFile(name+".state", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		sf.Close()
		return nil, fmt.Errorf("remote: %w", err)
	}
	t.f, t.state = f, sf
	raw, err := io.ReadAll(io.LimitReader(sf, maxStateSize+1))
	if err == nil && len(raw) > 0 {
		err = t.decodeState(raw)
	}
	if err == nil {
		// Anything past the recorded offset is a batch torn by a crash,
		// or one written but not recorded: its sender resends it.
		err = f.Truncate(t.off)
	}
	if err != nil {
		f.Close()
		sf.Close()
		return nil, fmt.Errorf("remote: %s: %w", name+".state", err)
	}
	t.stateLen = len(raw)
	for _, st := range t.streams {
		st.registered = true
		t.byKey[streamKey{st.machine, st.session}] = st
		if merge {
			t.machines[st.machine] = st.machineIdx
		}
	}
	return t, nil
}

// State file layout (little endian): "TPST" version:u32 length:u32, then
// length bytes: offset:u64 nextSeqID:u32 streams:u32, per stream
// machine:u64 session:[16] lastSeq:u64 machineIdx:u32, from version 2
// hostname (u8 length + bytes), the receiver counters (batches, packets,
// bytes stored, batches missing, gaps, refused, duplicated: 7 × u64), gap
// ranges:u32 (from:u64 to:u64)*, the sender's last TraceStats packet
// (u32 length + bytes), then in every version pairs:u32 (from:u32
// to:u32)*. It is rewritten in place with one pwrite after each batch;
// the length makes a shorter rewrite ignore the old tail.
const (
	stateMagic   = "TPST"
	stateVersion = 2
	maxStateSize = 16 << 20
)

var errBadState = errors.New("malformed state file")

func (t *traceOut) saveState(s *Store) error {
	b := append(t.stateBuf[:0], stateMagic...)
	b = binary.LittleEndian.AppendUint32(b, stateVersion)
	b = binary.LittleEndian.AppendUint32(b, 0) // length, set below
	b = binary.LittleEndian.AppendUint64(b, uint64(t.off))
	b = binary.LittleEndian.AppendUint32(b, t.nextSeqID)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(t.streams)))
	for _, st := range t.streams {
		b = binary.LittleEndian.AppendUint64(b, st.machine)
		b = append(b, st.session[:]...)
		b = binary.LittleEndian.AppendUint64(b, st.lastSeq)
		b = binary.LittleEndian.AppendUint32(b, st.machineIdx)
		host := st.hostname
		if len(host) > 255 {
			host = host[:255]
		}
		b = append(b, byte(len(host)))
		b = append(b, host...)
		r := &st.recv
		for _, v := range [...]uint64{r.BatchesStored, r.PacketsStored, r.BytesStored, r.BatchesMissing, r.Gaps, r.BatchesRefused, r.BatchesDuplicated} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.GapRanges)))
		for _, g := range r.GapRanges {
			b = binary.LittleEndian.AppendUint64(b, g.From)
			b = binary.LittleEndian.AppendUint64(b, g.To)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(st.lastStats)))
		b = append(b, st.lastStats...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(st.order)))
		for _, from := range st.order {
			b = binary.LittleEndian.AppendUint32(b, from)
			b = binary.LittleEndian.AppendUint32(b, st.seqs[from])
		}
	}
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-12))
	t.stateBuf = b
	if _, err := t.state.WriteAt(b, 0); err != nil {
		return fmt.Errorf("remote: %s.state: %w", t.name, err)
	}
	if grow := len(b) - t.stateLen; grow > 0 {
		s.Stats.DiskBytes.Add(int64(grow))
		t.stateLen = len(b)
	}
	return nil
}

// decodeState parses a state file (untrusted: it is on disk).
func (t *traceOut) decodeState(raw []byte) error {
	if len(raw) > maxStateSize {
		return fmt.Errorf("%w: larger than %d bytes", errBadState, maxStateSize)
	}
	if len(raw) < 12 || string(raw[:4]) != stateMagic {
		return fmt.Errorf("%w: no %q header", errBadState, stateMagic)
	}
	version := binary.LittleEndian.Uint32(raw[4:])
	if version < 1 || version > stateVersion {
		return fmt.Errorf("%w: version %d, want 1 to %d", errBadState, version, stateVersion)
	}
	n := binary.LittleEndian.Uint32(raw[8:])
	if uint64(n) > uint64(len(raw)-12) {
		return fmt.Errorf("%w: length %d overruns the file (%d bytes)", errBadState, n, len(raw))
	}
	d := decoder{b: raw[12 : 12+n], off: 12}
	off := d.u64()
	t.nextSeqID = d.u32()
	ns := d.u32()
	for i := uint32(0); i < ns && d.err == nil; i++ {
		st := &streamState{machine: d.u64()}
		copy(st.session[:], d.bytes(16))
		st.lastSeq = d.u64()
		st.machineIdx = d.u32()
		if version >= 2 {
			st.hostname = string(d.bytes(int(d.u8())))
			r := &st.recv
			for _, p := range [...]*uint64{&r.BatchesStored, &r.PacketsStored, &r.BytesStored, &r.BatchesMissing, &r.Gaps, &r.BatchesRefused, &r.BatchesDuplicated} {
				*p = d.u64()
			}
			ng := d.u32()
			if ng > tracefile.MaxGapRanges {
				d.fail("%d gap ranges, at most %d", ng, tracefile.MaxGapRanges)
				break
			}
			for j := uint32(0); j < ng; j++ {
				r.GapRanges = append(r.GapRanges, tracefile.GapRange{From: d.u64(), To: d.u64()})
			}
			nl := d.u32()
			if nl > maxLastStats || uint64(nl) > uint64(len(d.b)) {
				d.fail("TraceStats packet of %d bytes", nl)
				break
			}
			if nl > 0 {
				st.lastStats = append([]byte(nil), d.bytes(int(nl))...)
			}
		}
		np := d.u32()
		if uint64(np)*8 > uint64(len(d.b)) {
			d.fail("sequence map of %d entries", np)
			break
		}
		st.seqs = make(map[uint32]uint32, np)
		for j := uint32(0); j < np; j++ {
			from, to := d.u32(), d.u32()
			if _, dup := st.seqs[from]; !dup {
				st.order = append(st.order, from)
			}
			st.seqs[from] = to
		}
		t.streams = append(t.streams, st)
	}
	if d.err != nil {
		t.streams = nil
		return d.err
	}
	if len(d.b) != 0 {
		t.streams = nil
		return fmt.Errorf("%w: %d trailing bytes", errBadState, len(d.b))
	}
	if off > 1<<62 {
		t.streams = nil
		return fmt.Errorf("%w: offset %d", errBadState, off)
	}
	t.off = int64(off)
	return nil
}

// decoder reads little-endian fields, remembering the first overrun.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: offset %d: %s", errBadState, d.off, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) bytes(n int) []byte {
	if len(d.b) < n {
		d.fail("truncated")
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b, d.off = d.b[n:], d.off+n
	return v
}

func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.bytes(8)) }
func (d *decoder) u32() uint32 { return binary.LittleEndian.Uint32(d.bytes(4)) }
func (d *decoder) u8() uint8   { return d.bytes(1)[0] }

// isTraceStats reports whether packet p is a well-formed TracePacket whose
// top-level fields include trace_stats, without decoding more than the
// field headers.
func isTraceStats(p []byte) bool {
	found := false
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return false
		}
		p = p[n:]
		m := protowire.ConsumeFieldValue(num, typ, p)
		if m < 0 {
			return false
		}
		p = p[m:]
		if num == tracefile.FieldTraceStats && typ == protowire.BytesType {
			found = true
		}
	}
	return found
}
