// Package eval replays a complete trace through a ring buffer, with and
// without ProtoVM programs, and predicts what trace_processor imports of
// what survives: the engine of `tracepipe protovm eval`.
//
// It owns the replay geometry (producer packets cut into 4 KiB chunks per
// sequence, as a TraceWriter fills SMB pages), the three ways a program's
// state reaches trace_processor (none, restore, protovms) and the counts
// of Result. The ring is tracepipe's real buffer.TraceBuffer; the import
// prediction is tpimport's. It sits above buffer, protovm, tpimport and
// tracefile and below cmd/tracepipe: none of those may import it. It
// prints nothing (the CLI formats Results as a table, JSON or a chart),
// loads no program files (callers pass compiled programs) and holds at
// most the ring's survivors plus 16 MiB of service packets.
package eval

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Replay geometry of `protovm eval`: producer packets are cut into chunks
// the way a TraceWriter fills a 4 KiB SMB page holding one chunk (4 KiB
// minus the 8-byte chunk header), each fragment behind a 4-byte redundant
// varint length, as Perfetto's protozero writes it.
const (
	chunkPayload = 4096 - 8
	fragHeader   = 4
	producerID   = 1
	timingSample = 16 // one patch in 16 is timed
	// maxHead bounds the service packets eval keeps for the replayed
	// trace's head (a real trace has a few KiB of them).
	maxHead = 16 << 20
)

// Eval paths: how a program's state reaches trace_processor.
const (
	PathBaseline = "none"     // no program
	PathRestore  = "restore"  // per-sequence VM; CLEARED + state ahead of each sequence's first survivor
	PathProtoVMs = "protovms" // Perfetto's path: one VM, state in a protovms packet (TP replacement semantics)
)

// Options configures one evaluation.
type Options struct {
	BufferSize    int       // the ring's size in bytes
	MemoryLimitKB uint32    // each VM's state memory limit
	Programs      []Program // evaluated in order, each after the baseline
	ProtoVMs      bool      // also evaluate Perfetto's protovms path
	Check         tpimport.Options
	// OnTruncated, when not nil, is told that the trace is truncated:
	// the replay used the records before the cut (see tracefile.ReadFile).
	OnTruncated func(records int, err error)
}

// Program is one program to evaluate.
type Program struct {
	Path string // as given: names the variants (by its base name) and errors
	Code []byte // compiled VmProgram bytes (protovm.Compile, ParseProgram)
}

// Result is one variant's outcome.
type Result struct {
	Variant string `json:"variant"`
	Program string `json:"program,omitempty"`
	Path    string `json:"path"`
	// Packets: producer packets (trusted_packet_sequence_id > 1) in the full trace.
	Packets     int64 `json:"packets"`
	Survived    int64 `json:"survived"`    // read back from the ring
	Overwritten int64 `json:"overwritten"` // complete packets the ring overwrote
	// Importable: survivors trace_processor imports intact, per tpimport;
	// Share = Importable / Packets.
	Importable int64   `json:"importable"`
	Share      float64 `json:"share"`
	// SurvivorShare = Importable / Survived.
	SurvivorShare  float64  `json:"survivor_share"`
	Skipped        int64    `json:"skipped"`         // NEEDS packets skipped
	Unresolved     int64    `json:"unresolved_iids"` // failed iid lookups
	RestorePackets int64    `json:"restore_packets"`
	StateBytes     int      `json:"state_bytes"`
	PatchOk        uint64   `json:"patches_ok"`
	PatchError     uint64   `json:"patches_error"`
	PatchAbort     uint64   `json:"patches_abort"`
	NsPerPatch     float64  `json:"ns_per_patch"`
	Findings       []string `json:"findings"`
}

// variant is one way of running a program (or none) over the ring's
// overwritten packets. Every variant sees the same ring: the chunks
// written are the same, only what is done with overwritten packets and
// how the readback is presented differ.
type variant struct {
	res     Result
	prog    []byte
	memory  int
	seqVMs  map[uint16]*protovm.VM // restore path
	vm      *protovm.VM            // protovms path
	patchNs int64                  // time spent in the timed patches
	timed   int64                  // patches timed
}

// replayRing is the ring all variants share.
type replayRing struct {
	buf         *buffer.TraceBuffer
	variants    []*variant
	overwritten int64
	scratch     []byte
	err         error
}

// sequence is the chunker of one producer sequence.
type sequence struct {
	writer  uint16
	client  buffer.ClientIdentity
	chunkID uint32
	payload []byte
	frags   uint16
	flags   uint8
}

// Run replays the producer packets of the trace at path through a ring
// of opts.BufferSize, once, feeding what the ring overwrites to every
// variant's VMs, then predicts trace_processor's import of the readback
// as each variant presents it.
func Run(path string, opts Options) ([]Result, error) {
	variants := []*variant{{res: Result{Variant: "baseline", Path: PathBaseline}}}
	mem := int(opts.MemoryLimitKB) * 1024
	for _, pr := range opts.Programs {
		p, prog := pr.Path, pr.Code
		name := filepath.Base(p)
		paths := []string{PathRestore}
		var err error
		if opts.ProtoVMs {
			paths = append(paths, PathProtoVMs)
		}
		for _, path := range paths {
			v := &variant{res: Result{Variant: name + "/" + path, Program: p, Path: path}, prog: prog, memory: mem}
			if path == PathRestore {
				v.seqVMs = map[uint16]*protovm.VM{}
			} else if v.vm, err = protovm.New(prog, mem); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			variants = append(variants, v)
		}
	}
	b, err := buffer.New(opts.BufferSize, buffer.RingBuffer)
	if err != nil {
		return nil, err
	}
	defer b.Close() // the survivors are copies (readAll)
	ring := &replayRing{buf: b, variants: variants}
	b.SetOverwriteObserver(ring.observe)

	// One pass: service packets are kept for the output's head, producer
	// packets are chunked into the ring.
	var head [][]byte
	headBytes := 0
	seqs := map[uint32]*sequence{}
	var packets int64
	var stripped []byte
	err = tracefile.ReadFile(path, tracefile.ReaderOptions{}, opts.OnTruncated, func(rec tracefile.Record) error {
		var t tracefile.Trusted
		stripped, t = stripTrusted(stripped[:0], rec.Packet)
		if t.SequenceID <= 1 {
			info, err := tracefile.DecodePacket(rec.Packet)
			if err != nil {
				return nil
			}
			switch info.PayloadField {
			case tracefile.FieldTraceStats, tracefile.FieldTraceProvenance, tracefile.FieldProtoVMs:
				// They describe the original session's buffers.
			default:
				if headBytes += len(rec.Packet); headBytes > maxHead {
					return fmt.Errorf("packet at offset %d: more than %d bytes of service packets (sequence id 0 or 1); is this a tracepipe or Perfetto trace?", rec.Offset, maxHead)
				}
				head = append(head, append([]byte(nil), rec.Packet...))
			}
			return nil
		}
		if len(stripped) == 0 {
			return nil // nothing a producer could have written
		}
		s := seqs[t.SequenceID]
		if s == nil {
			if t.SequenceID > 0xFFFF {
				return fmt.Errorf("packet at offset %d: sequence id %d does not fit a writer id", rec.Offset, t.SequenceID)
			}
			s = &sequence{writer: uint16(t.SequenceID), client: buffer.ClientIdentity{UID: t.UID, PID: t.PID}}
			seqs[t.SequenceID] = s
		}
		packets++
		s.add(stripped, b)
		return ring.err
	})
	if err != nil {
		return nil, err
	}
	if packets == 0 {
		return nil, ErrNoProducerPackets
	}
	for _, id := range slices.Sorted(maps.Keys(seqs)) {
		seqs[id].flush(b)
	}
	if ring.err != nil {
		return nil, ring.err
	}
	survivors := ring.readAll()
	results := make([]Result, 0, len(variants))
	for i, v := range variants {
		v.res.Packets = packets
		v.res.Overwritten = ring.overwritten
		o := opts.Check
		// The survivors' bytes are the same in every variant: decode them
		// strictly once.
		o.NoStrict = o.NoStrict || i > 0
		v.present(head, survivors, slices.Sorted(maps.Keys(seqs)), o)
		results = append(results, v.res)
	}
	return results, nil
}

// stripTrusted copies a packet without the fields the service appends
// (trusted_uid, trusted_packet_sequence_id, trusted_pid, machine_id,
// previous_packet_dropped), which the replay appends anew, and returns
// them. A malformed field ends the copy.
func stripTrusted(dst, pkt []byte) ([]byte, tracefile.Trusted) {
	// DecodePacket reads the trusted fields (the last occurrence wins, as
	// for the replay); on a malformed packet it has those before the bad
	// field, as the copy below does.
	info, _ := tracefile.DecodePacket(pkt)
	t := tracefile.Trusted{
		UID: info.TrustedUID, SequenceID: info.SequenceID, PID: info.TrustedPID, HasPID: info.HasTrustedPID,
		MachineID: info.MachineID, PreviousPacketDropped: info.PreviousPacketDropped,
	}
	for it := wire.Fields(pkt); it.Next(); {
		f := it.Field()
		if f.Type == protowire.VarintType {
			switch f.Num {
			case tracefile.FieldTrustedUID, tracefile.FieldTrustedSequenceID, tracefile.FieldTrustedPID,
				tracefile.FieldMachineID, tracefile.FieldPreviousPacketDropped:
				continue
			}
		}
		dst = append(dst, f.Raw(pkt)...)
	}
	return dst, t
}

// add appends one packet to the sequence's open chunk. A packet that fits
// in a chunk but not in what is left of the open one starts a new chunk; a
// bigger one is fragmented across chunks.
func (s *sequence) add(pkt []byte, b *buffer.TraceBuffer) {
	whole := chunkPayload - fragHeader
	if room := whole - len(s.payload); room <= 0 || len(pkt) > room && len(pkt) <= whole {
		s.flush(b)
	}
	for {
		n := min(len(pkt), chunkPayload-len(s.payload)-fragHeader)
		s.payload = appendRedundantVarint(s.payload, n)
		s.payload = append(s.payload, pkt[:n]...)
		s.frags++
		pkt = pkt[n:]
		if len(pkt) == 0 {
			return
		}
		s.flags |= smb.FlagLastPacketContinuesOnNextChunk
		s.flush(b)
		s.flags = smb.FlagFirstPacketContinuesFromPrevChunk
	}
}

// flush commits the open chunk to the ring.
func (s *sequence) flush(b *buffer.TraceBuffer) {
	if s.frags == 0 {
		return
	}
	b.CopyChunkUntrusted(producerID, s.client, s.writer, s.chunkID, s.frags, s.flags, true, s.payload)
	s.chunkID++
	s.payload, s.frags, s.flags = s.payload[:0], 0, 0
}

// appendRedundantVarint writes n as a 4-byte varint (protozero's reserved
// size field).
func appendRedundantVarint(b []byte, n int) []byte {
	return append(b, byte(n)|0x80, byte(n>>7)|0x80, byte(n>>14)|0x80, byte(n>>21)&0x7f)
}

// observe feeds an overwritten packet to every variant's VMs.
func (r *replayRing) observe(seq buffer.SequenceProperties, packet [][]byte) {
	r.overwritten++
	if len(r.variants) == 1 || r.err != nil {
		return // baseline only
	}
	r.scratch = r.scratch[:0]
	for _, s := range packet {
		r.scratch = append(r.scratch, s...)
	}
	cleared := isCleared(r.scratch)
	timed := r.overwritten%timingSample == 0
	for _, v := range r.variants[1:] {
		vm := v.vm
		if v.res.Path == PathRestore {
			// A CLEARED packet starts the sequence's state afresh.
			vm = v.seqVMs[seq.WriterID]
			if vm == nil || cleared {
				nvm, err := protovm.New(v.prog, v.memory)
				if err != nil {
					r.err = err
					return
				}
				v.countVM(vm)
				vm = nvm
				v.seqVMs[seq.WriterID] = vm
			}
		}
		// Time one patch in timingSample: reading the clock costs
		// about as much as a small patch.
		if !timed {
			vm.ApplyPatch(r.scratch)
			continue
		}
		start := time.Now()
		vm.ApplyPatch(r.scratch)
		v.patchNs += time.Since(start).Nanoseconds()
		v.timed++
	}
}

// countVM adds a retired VM's outcomes to the result.
func (v *variant) countVM(vm *protovm.VM) {
	if vm == nil {
		return
	}
	st := vm.Stats()
	v.res.PatchOk += st.PatchesApplied
	v.res.PatchError += st.PatchesFailed
	v.res.PatchAbort += st.PatchesAborted
}

// isCleared reports whether a packet carries SEQ_INCREMENTAL_STATE_CLEARED
// (sequence_flags bit 0 or the deprecated incremental_state_cleared).
func isCleared(pkt []byte) bool {
	cleared := false
	for it := wire.Fields(pkt); it.Next(); {
		switch f := it.Field(); {
		case f.Type != protowire.VarintType:
		case f.Num == tracefile.FieldSequenceFlags:
			cleared = f.Varint&1 != 0
		case f.Num == tracefile.FieldIncrementalStateClear:
			cleared = f.Varint != 0
		}
	}
	return cleared
}

// survivor is one packet read back from the ring.
type survivor struct {
	packet []byte // producer bytes, without trusted fields
	seq    buffer.SequenceProperties
	loss   uint32
}

// readAll reads the ring once. The survivors hold at most the ring's size.
func (r *replayRing) readAll() []survivor {
	var out []survivor
	var ends []int
	arena := make([]byte, 0, r.buf.UsedSize()) // every survivor's bytes, back to back (they fit in the ring)
	var p buffer.Packet
	r.buf.BeginRead()
	for r.buf.ReadNextTracePacket(&p) {
		arena = p.AppendTo(arena)
		ends = append(ends, len(arena))
		out = append(out, survivor{seq: p.Seq, loss: p.PreviousPacketDropped})
	}
	start := 0
	for i, end := range ends {
		out[i].packet = arena[start:end:end]
		start = end
	}
	return out
}

// present builds the trace the service would write for this variant from
// the ring's survivors and predicts its import.
func (v *variant) present(head [][]byte, survivors []survivor, seqIDs []uint32, opts tpimport.Options) {
	c := tpimport.NewChecker(opts)
	var off int64
	feed := func(p []byte) {
		c.Packet(p, off)
		off += int64(tracefile.RecordSize(len(p)))
	}
	for _, p := range head {
		feed(p)
	}
	trusted := func(s buffer.SequenceProperties, loss uint32) tracefile.Trusted {
		return tracefile.Trusted{UID: s.Client.UID, SequenceID: uint32(s.WriterID), PID: s.Client.PID, HasPID: true, PreviousPacketDropped: loss}
	}
	if v.res.Path == PathProtoVMs {
		var seqsOfBuffer []byte
		for _, id := range seqIDs {
			seqsOfBuffer = wire.AppendBytes(seqsOfBuffer, 1, appendVarintPair(nil, uint64(id), producerID))
		}
		feed(tracefile.AppendTrusted(wire.AppendBytes(nil, tracefile.FieldTraceProvenance, wire.AppendBytes(nil, 2, seqsOfBuffer)), tracefile.Trusted{SequenceID: 1}))
		var inst []byte
		inst = wire.AppendBytes(inst, 1, v.prog)
		inst = wire.AppendBytes(inst, 2, v.vm.SerializeIncrementalState(nil))
		inst = wire.AppendVarint(inst, 3, uint64(v.memory/1024))
		inst = wire.AppendVarint(inst, 4, producerID)
		feed(tracefile.AppendTrusted(wire.AppendBytes(nil, tracefile.FieldProtoVMs, wire.AppendBytes(nil, 1, inst)), tracefile.Trusted{SequenceID: 1}))
		v.countVM(v.vm)
		v.res.StateBytes = len(v.vm.SerializeIncrementalState(nil))
	}
	seen := map[uint16]bool{}
	var out []byte
	for _, s := range survivors {
		v.res.Survived++
		w := s.seq.WriterID
		loss := s.loss
		if !seen[w] {
			seen[w] = true
			if vm := v.seqVMs[w]; vm != nil {
				// The restore packet: CLEARED + folded state + the loss,
				// ahead of the sequence's first survivor.
				out = vm.SerializeIncrementalState(out[:0])
				out = wire.AppendVarint(out, tracefile.FieldSequenceFlags, 1)
				out = tracefile.AppendTrusted(out, trusted(s.seq, loss))
				feed(out)
				v.res.RestorePackets++
				loss = 0
			}
		}
		out = tracefile.AppendTrusted(append(out[:0], s.packet...), trusted(s.seq, loss))
		feed(out)
	}
	for _, vm := range v.seqVMs {
		v.countVM(vm)
		v.res.StateBytes += len(vm.SerializeIncrementalState(nil))
	}
	r := c.Finish()
	v.res.Importable = r.ProducerImported - v.res.RestorePackets
	for _, s := range r.Sequences {
		if s.ID > 1 {
			v.res.Skipped += s.NeedsSkipped
			for _, n := range s.Unresolved {
				v.res.Unresolved += n
			}
		}
	}
	v.res.Findings = r.Codes()
	if v.res.Findings == nil {
		v.res.Findings = []string{}
	}
	if v.res.Packets > 0 {
		v.res.Share = float64(v.res.Importable) / float64(v.res.Packets)
	}
	if v.res.Survived > 0 {
		v.res.SurvivorShare = float64(v.res.Importable) / float64(v.res.Survived)
	}
	if v.timed > 0 {
		v.res.NsPerPatch = float64(v.patchNs) / float64(v.timed)
	}
}

func appendVarintPair(b []byte, a, c uint64) []byte {
	return wire.AppendVarint(wire.AppendVarint(b, 1, a), 2, c)
}

var ErrNoProducerPackets = errors.New("the trace holds no producer packets (trusted_packet_sequence_id > 1)")
