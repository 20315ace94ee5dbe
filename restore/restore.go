package restore

import (
	"slices"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tracefile"
)

// This file holds the fold and the restore packet, tracepipe's answer to ring wrap
// (trace-processor-import.md §7 item 7, §8 t2/t4): a data source whose
// protovm program serves the "restore" path gets, for every one of its
// sequences, a fold of everything the sequence wrote since its last
// SEQ_INCREMENTAL_STATE_CLEARED packet — the packets the ring overwrote and
// the packets read back alike. When a packet of such a sequence is read
// after a loss (the ring overwrote part of the sequence, or any other
// previous_packet_dropped), the readback first writes a restore: one
// packet on the same trusted_packet_sequence_id carrying CLEARED, the
// folded interned_data / trace_packet_defaults and the loss flag, followed
// by one packet per other payload the state keeps (track descriptors,
// process tree, counter events), and stamps the surviving packet without
// the loss flag. trace_processor then imports every surviving packet.
//
// The fold is per sequence, not per (data source, program) as
// protovm.Instances is: each writer interns its own iids (two writers may
// give iid 1 different names), and a restore packet re-defines the state of
// one sequence only. It restarts at each CLEARED packet, as
// trace_processor's state does, which also bounds its memory to one
// incremental-state generation.

// Program is the restore-path program of one data source instance.
// One Program may serve several Sets (a snapshot's copy shares it).
type Program struct {
	program []byte
	limit   int // bytes
	// fields, when filtered, are the top-level fields a packet needs for
	// the program to change anything (protovm.Program.TopLevelSrcFields):
	// other packets skip the VM, which keeps the per-packet cost of a
	// restore sequence low (its event packets are folded too).
	fields   []uint32
	filtered bool
}

// NewProgram returns the restore-path program of a validated ProtoVM
// program (its bytes) with a memory limit in bytes.
func NewProgram(program []byte, limitBytes int) *Program {
	rp := &Program{program: program, limit: limitBytes}
	if p, err := protovm.ParseProgram(program); err == nil {
		rp.fields, rp.filtered = p.TopLevelSrcFields()
	}
	return rp
}

// Seq is the fold of one sequence (Set.Seq).
type Seq struct {
	prog *Program
	vm   *protovm.VM // nil until the sequence's first packet, and after a failed New
	// pending: packets of the sequence were overwritten since its last
	// read packet, so the next one read needs a restore.
	pending bool
	// read: a packet of the sequence was read back through this set (a
	// snapshot's copy: the sequence had moved packets).
	read bool
	// sinceTransfer: packets folded while a transfer_on_clone is pending
	// (transfer.go).
	sinceTransfer [][]byte
}

// Set is the sequence state restore of one buffer. It is not safe for
// concurrent use: the session core uses it only on its goroutine (the
// buffer's overwrite observer runs there too); a snapshot's copy
// (CloneForSnapshot) is used only on the snapshot's goroutine.
type Set struct {
	programs map[uint16]*Program // producer id → program
	seqs     map[uint32]*Seq     // producer<<16|writer
	join     []byte              // fragments of an overwritten packet
	state    []byte              // serialised state
	body     []byte              // the state's incremental fields
	survivor []byte              // the packet a restore goes ahead of

	restores      uint64 // restore packets written
	foldOK        uint64 // overwritten packets the program returned Ok for
	foldAborted   uint64 // patches (overwritten or read) the program aborted
	foldNewFailed uint64 // VMs that could not be created (never for a validated program)
	unrouted      uint64 // overwritten packets of producers without any program

	transfer *transfer // a transfer_on_clone pending (transfer.go)
}

// NewSet returns the restore of one buffer, without programs yet.
func NewSet() *Set {
	return &Set{programs: map[uint16]*Program{}, seqs: map[uint32]*Seq{}}
}

// AddProgram makes producer's sequences fold with prog.
func (r *Set) AddProgram(producer uint16, prog *Program) { r.programs[producer] = prog }

// Serves reports whether producer's sequences are folded here (it has a
// restore program); the overwrite observer routes the others elsewhere.
func (r *Set) Serves(producer uint16) bool { return r.programs[producer] != nil }

// CountUnrouted counts an overwritten packet that neither this set nor
// any other ProtoVM took (its producer has no program).
func (r *Set) CountUnrouted() { r.unrouted++ }

// Stats counts what a Set did, for the TraceStats packet.
type Stats struct {
	Restores      uint64 // restore packets written
	FoldOK        uint64 // overwritten packets the program returned Ok for
	FoldAborted   uint64 // patches (overwritten or read) the program aborted
	FoldNewFailed uint64 // VMs that could not be created (never for a validated program)
	Unrouted      uint64 // overwritten packets of producers without any program
}

// Stats returns the set's counters.
func (r *Set) Stats() Stats {
	return Stats{Restores: r.restores, FoldOK: r.foldOK, FoldAborted: r.foldAborted, FoldNewFailed: r.foldNewFailed, Unrouted: r.unrouted}
}

// Seq returns the fold of (producer, writer), or nil when the producer
// has no restore program.
func (r *Set) Seq(producer, writer uint16) *Seq {
	key := uint32(producer)<<16 | uint32(writer)
	if q, ok := r.seqs[key]; ok {
		return q
	}
	prog := r.programs[producer]
	if prog == nil {
		return nil
	}
	q := &Seq{prog: prog}
	r.seqs[key] = q
	return q
}

// fold applies one packet of the sequence (producer bytes, without the
// trusted suffix) to its state; a CLEARED packet first starts a new state.
func (r *Set) fold(q *Seq, packet []byte) protovm.Code {
	sc := scanPacket(packet, q.prog)
	if r.transfer != nil && (sc.relevant || sc.cleared) {
		r.logFold(q, packet) // transfer.go
	}
	if q.vm == nil || sc.cleared {
		vm, err := protovm.New(q.prog.program, q.prog.limit)
		if err != nil {
			q.vm = nil
			r.foldNewFailed++
			return protovm.Abort
		}
		q.vm = vm
	}
	if !sc.relevant {
		return protovm.Error // exact: the program would change nothing
	}
	st := q.vm.ApplyPatch(packet)
	if st.Code == protovm.Abort {
		r.foldAborted++
	}
	return st.Code
}

// Observe folds one overwritten packet (its fragments, in order) of a
// sequence: the buffer's overwrite observer calls it for producers the set
// Serves. The packet was never validated: malformed bytes end its scan.
func (r *Set) Observe(seq buffer.SequenceProperties, fragments [][]byte) {
	q := r.Seq(seq.ProducerID, seq.WriterID)
	if q == nil {
		return
	}
	data := fragments[0]
	if len(fragments) > 1 {
		r.join = r.join[:0]
		for _, f := range fragments {
			r.join = append(r.join, f...)
		}
		data = r.join
	}
	if r.fold(q, data) == protovm.Ok {
		r.foldOK++
	}
	q.pending = true
	if cap(r.join) > maxRetainedRestoreScratch {
		r.join = nil
	}
}

const maxRetainedRestoreScratch = 1 << 20

// packetScan is what the restore needs from a packet's top level.
type packetScan struct {
	// cleared: SEQ_INCREMENTAL_STATE_CLEARED (sequence_flags bit 1, or the
	// deprecated incremental_state_cleared), the last occurrence winning.
	cleared bool
	// relevant: the packet has a top-level field the program needs
	// (always true for a program that cannot be filtered, or a nil prog).
	relevant bool
	// loss is the producer's own previous_packet_dropped (e.g. SMB_FULL,
	// which producers set), the last occurrence.
	loss uint32
}

// scanPacket reads a producer packet's top level. Malformed bytes end the
// scan (the packet was validated before it is read back; an overwritten
// one may not have been).
func scanPacket(b []byte, prog *Program) packetScan {
	sc := packetScan{relevant: prog == nil || !prog.filtered}
	for it := wire.Fields(b); it.Next(); {
		f := it.Field()
		if !sc.relevant && slices.Contains(prog.fields, uint32(f.Num)) {
			sc.relevant = true
		}
		if f.Type != protowire.VarintType {
			continue
		}
		switch v := f.Varint; f.Num {
		case tracefile.FieldSequenceFlags:
			sc.cleared = v&tracefile.SeqIncrementalStateCleared != 0
		case tracefile.FieldIncrementalStateClear:
			sc.cleared = v != 0
		case tracefile.FieldPreviousPacketDropped:
			sc.loss = uint32(v)
		}
	}
	return sc
}

// Ahead runs for each validated packet of a restore sequence read back
// into data (its producer bytes at data[start:]; ends holds the end offset
// of each earlier packet), before the trusted suffix is stamped. If the packet follows a loss — the buffer's (tr) or
// the producer's own previous_packet_dropped (SMB_FULL) — and does not
// clear the state itself, a restore is inserted ahead of it and the loss
// moves onto the restore: the packet then carries previous_packet_dropped
// = 0 (appended, so it overrides the producer's). The packet is then
// folded. It returns data and ends with the restore packets appended and
// the packet (unstamped) after them, and the trusted fields to stamp on
// the packet. In steady state (no restore due) it does not allocate.
func (r *Set) Ahead(data []byte, ends []int, q *Seq, start int, tr tracefile.Trusted) ([]byte, []int, tracefile.Trusted) {
	b := out{data: data, ends: ends}
	pkt := b.data[start:]
	sc := scanPacket(pkt, nil)
	if (tr.PreviousPacketDropped != 0 || sc.loss != 0 || q.pending) && q.vm != nil && !sc.cleared {
		r.survivor = append(r.survivor[:0], pkt...)
		b.data = b.data[:start]
		rt := tr
		rt.PreviousPacketDropped |= sc.loss
		r.appendRestore(&b, q, r.survivor, rt)
		tr.PreviousPacketDropped = 0
		start = len(b.data)
		b.data = append(b.data, r.survivor...)
		if sc.loss != 0 {
			b.data = wire.AppendVarint(b.data, tracefile.FieldPreviousPacketDropped, 0)
		}
		pkt = b.data[start:]
		if cap(r.survivor) > maxRetainedRestoreScratch {
			r.survivor = nil
		}
	}
	q.pending, q.read = false, true
	r.fold(q, pkt)
	return b.data, b.ends, tr
}

// out is where Ahead appends: packets back to back and their ends.
type out struct {
	data []byte
	ends []int
}

// appendRestore writes the restore of q ahead of survivor: the restore
// packet (CLEARED, the state's interned_data and trace_packet_defaults,
// the loss flag of tr), then one packet per other payload field of the
// state, TrackEvent last (a counter event needs its track's descriptor
// before it in file order), each with the survivor's timestamp (and
// clock) when it has one.
func (r *Set) appendRestore(b *out, q *Seq, survivor []byte, tr tracefile.Trusted) {
	r.state = q.vm.SerializeIncrementalState(r.state[:0])
	r.body = r.body[:0]
	var events bool
	walkTopLevel(r.state, func(num protowire.Number, field []byte) {
		switch {
		case num == tracefile.FieldInternedData || num == tracefile.FieldTracePacketDefaults:
			r.body = append(r.body, field...)
		case num == tracefile.FieldTrackEvent:
			events = true
		}
	})
	b.data = tracefile.AppendRestorePacket(b.data, r.body, tr)
	b.ends = append(b.ends, len(b.data))
	r.restores++

	info, _ := tracefile.DecodePacket(survivor) // validated before
	plain := tr
	plain.PreviousPacketDropped = 0
	emit := func(want bool) {
		walkTopLevel(r.state, func(num protowire.Number, field []byte) {
			if !tracefile.IsPayloadField(int32(num)) || (num == tracefile.FieldTrackEvent) != want {
				return
			}
			start := len(b.data)
			if info.HasTimestamp {
				b.data = tracefile.AppendTimestamp(b.data, info.Timestamp)
				if info.TimestampClockID != 0 {
					b.data = wire.AppendVarint(b.data, tracefile.FieldTimestampClockID, uint64(info.TimestampClockID))
				}
			} else if want {
				b.data = b.data[:start] // a TrackEvent without timestamp would be dropped
				return
			}
			b.data = append(b.data, field...)
			b.data = tracefile.AppendTrusted(b.data, plain)
			b.ends = append(b.ends, len(b.data))
		})
	}
	emit(false)
	if events {
		emit(true)
	}
}

// walkTopLevel calls fn with each well-formed top-level field of msg
// (tag included), stopping at the first malformed one.
func walkTopLevel(msg []byte, fn func(num protowire.Number, field []byte)) {
	for it := wire.Fields(msg); it.Next(); {
		f := it.Field()
		fn(f.Num, f.Raw(msg))
	}
}
