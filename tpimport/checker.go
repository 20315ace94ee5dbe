package tpimport

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/distinct"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Nested field numbers (reference/trace-format.md §4–§7, protovm.md §2.2,
// trace-processor-import.md §2–§6).
const (
	// TrackEvent
	teType         = 9
	teTrackUUID    = 11
	teNameIID      = 10
	teCategoryIIDs = 3
	teCounterValue = 30
	teDoubleValue  = 44
	teTsDeltaUs    = 1
	teTsAbsoluteUs = 16

	teTypeCounter = 4
	teTypeState   = 5

	// InternedData
	idEventCategories = 1
	idEventNames      = 2

	// TrackDescriptor
	tdUUID    = 1
	tdProcess = 3
	tdThread  = 4
	tdCounter = 8

	// TracePacketDefaults
	defClockID     = 58
	defTrackEvent  = 11
	tedTrackUUID   = 11
	snapClocks     = 1
	snapPrimary    = 2
	clockID        = 1
	clockTimestamp = 2
	clockIncrement = 3

	// TraceConfig
	tcBuffers           = 1
	tcWriteIntoFile     = 8
	tcFileWritePeriodMs = 9
	tcFlushPeriodMs     = 13
	bufFillPolicy       = 4
	fillDiscard         = 2

	// SystemInfo
	siServiceVersion = 4

	// TraceProvenance / ProtoVms
	provBuffers      = 2
	provSequences    = 1
	provSeqID        = 1
	provProducerID   = 2
	pvmInstance      = 1
	pvmProgram       = 1
	pvmState         = 2
	pvmMemoryLimitKB = 3
	pvmProducerID    = 4

	clockBoottime  = 6
	clockTraceFile = 11

	serviceSequence = 1 // the service's own packets

	// longTraceModePeriodMs: long_trace_mode_bytes_overwritten applies below
	// a file_write_period of one day.
	longTraceModePeriodMs = 86_400_000
	// minFlushingServiceMajor: services from this major version flush on
	// every write_into_file session, so no flush_period is needed.
	minFlushingServiceMajor = 54
)

// internedFieldNames names InternedData fields (trace-processor-import.md §2).
var internedFieldNames = map[int32]string{
	1: "event_categories", 2: "event_names", 3: "debug_annotation_names", 4: "source_locations",
	20: "log_message_body", 25: "histogram_names", 27: "debug_annotation_value_type_names",
	29: "debug_annotation_string_values", 43: "correlation_id_str",
}

func internedFieldName(f int32) string {
	if n, ok := internedFieldNames[f]; ok {
		return n
	}
	return "field_" + strconv.Itoa(int(f))
}

// lossCauseNames are previous_packet_dropped bits 1..8 as trace_processor
// names its per-cause stats (traced_buf_data_loss_<name>).
var lossCauseNames = [...]string{"read_gap", "chunk_corrupted", "orphan_continuation", "reassembly_gap",
	"reassembly_broken_chain", "overwrite", "writer_abort", "smb_full"}

// Options tunes a Checker; the zero value is the defaults.
type Options struct {
	// ClockSlackNs is how far (ns) a producer timestamp may lie outside the
	// session's clock range before it is reported: from the file's first
	// clock snapshot to the last service timestamp (snapshots, service
	// events, trace stats). Files without a clock snapshot are not checked
	// (a rotated file's service packets say nothing about when its oldest
	// packets were written). 0 → 60 s; < 0 → never.
	ClockSlackNs int64
	// NoStrict turns strict payload decoding off (it costs a walk of every
	// nested message).
	NoStrict bool
	// MaxRecordSize is passed to tracefile's reader.
	MaxRecordSize int
	// MaxSequences bounds the sequences tracked one by one (their state is
	// the Checker's memory); the packets of further sequences are checked
	// together with less state, and the report says so (see
	// Checker.sequence). 0 → DefaultMaxSequences.
	MaxSequences int
	// MaxPacketBuffer bounds the bytes held of one packet: the fields of a
	// longer packet that do not fit are skipped unread and the packet is
	// reported as not checked in full (tracefile.ReaderOptions). 0 →
	// DefaultMaxPacketBuffer; < 0 → packets are read whole.
	MaxPacketBuffer int
}

// DefaultMaxPacketBuffer is the default Options.MaxPacketBuffer (16 MiB).
const DefaultMaxPacketBuffer = 16 << 20

type seqKey struct{ machine, seq uint32 }

type internKey struct {
	field int32
	iid   uint64
}

// generation is one incremental-state generation of a sequence: its
// interned ids, and the lookups that missed so far (they may still
// resolve when the same generation interns the id later, as trace_processor
// resolves at parse time against the generation the packet was tokenized
// in).
type generation struct {
	iids    map[internKey]struct{}
	pending map[internKey]int64
	first   map[internKey]int64 // offset of the first missing lookup
}

type sequence struct {
	key      seqKey
	rep      SequenceReport
	seen     bool
	valid    bool
	gen      *generation
	defaults struct {
		present   bool
		clockID   uint32
		trackUUID uint64
		hasTrack  bool
	}
	vms []*vmInst
	ts  struct {
		has      bool
		lo, hi   uint64
		outside  int64
		firstOff int64
	}
	first map[string]int64 // first offset per finding code
}

type vmInst struct {
	vm  *protovm.VM
	err bool
}

type clockKey struct {
	machine uint32 // clock scope: 0 for the host, else a forked machine (machines.go)
	seq     uint32 // 0 for global clocks (ids < 64)
	id      uint32
}

// pendingKey: the packets of one sequence deferred for one clock (a
// sequence's drops are charged to it alone).
type pendingKey struct {
	clock clockKey
	seq   seqKey
}

type pendingClock struct {
	count int64
	seq   seqKey
	off   int64
}

// Checker predicts trace_processor's import of one trace, fed packet by
// packet in file order. Its memory is the per-sequence state (interned
// ids, track uuids, clock ids, ProtoVM states), never the packets.
type Checker struct {
	opts Options
	rep  Report

	seqs  map[seqKey]*sequence
	order []*sequence

	stats    map[statKey]*Stat
	findings map[findingKey]*Finding

	// clocks
	clockParent   map[clockKey]clockKey
	traceClock    uint32
	hasTraceClock bool
	clockOffset   map[clockKey]int64        // trace time − clock time, from the first snapshot holding both
	clockDomains  map[clockKey]*clockDomain // clocks with a unit or incremental (clocks.go)
	pendingClocks map[pendingKey]*pendingClock
	svc           struct {
		has    bool
		lo, hi uint64
	}

	// tracks
	counterTracks map[uint64]struct{}
	described     map[uint64]struct{}
	usedTracks    map[uint64]trackUse

	// config and metadata (last wins)
	config        []byte
	serviceVer    string
	hasServiceVer bool
	lastStats     *tracefile.TraceStats

	mach machines // machine routing and adoption (machines.go)

	// sequences beyond opts.MaxSequences: one summary row per machine, and
	// a fixed-size estimate of how many distinct sequences it stands for
	beyond     map[uint32]*sequence
	beyondKeys *distinct.Counter // allocated with the first summary row

	// ProtoVM
	provenance map[int32][]uint32
	vms        []*vmInst
	scratch    []byte
}

type trackUse struct {
	seq   seqKey
	count int64
	off   int64
}

type statKey struct {
	name  string
	index int
}

type findingKey struct {
	code  string
	seq   seqKey
	index int
}

// NewChecker returns a Checker for one trace.
func NewChecker(opts Options) *Checker {
	if opts.ClockSlackNs == 0 {
		opts.ClockSlackNs = 60e9
	}
	if opts.MaxSequences <= 0 {
		opts.MaxSequences = DefaultMaxSequences
	}
	return &Checker{
		opts:          opts,
		seqs:          map[seqKey]*sequence{},
		stats:         map[statKey]*Stat{},
		findings:      map[findingKey]*Finding{},
		clockParent:   map[clockKey]clockKey{},
		clockOffset:   map[clockKey]int64{},
		pendingClocks: map[pendingKey]*pendingClock{},
		counterTracks: map[uint64]struct{}{},
		described:     map[uint64]struct{}{},
		usedTracks:    map[uint64]trackUse{},
		provenance:    map[int32][]uint32{},
	}
}

// CheckFile checks the trace at path (plain, gzip or zstd). A file that
// ends inside a packet is checked up to its last whole packet and reported
// with CodeTruncated; other read errors are returned.
func CheckFile(path string, opts Options) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := Check(f, opts)
	if r != nil {
		r.File = path
	}
	if err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Check reads a whole trace from r and returns the prediction. See CheckFile.
func Check(r io.Reader, opts Options) (*Report, error) {
	c := NewChecker(opts)
	keep := opts.MaxPacketBuffer
	if keep == 0 {
		keep = DefaultMaxPacketBuffer
	}
	rd, err := tracefile.NewReaderOptions(r, tracefile.ReaderOptions{MaxRecordSize: opts.MaxRecordSize, MaxPacketBuffer: max(keep, 0)})
	if err != nil {
		if errors.Is(err, tracefile.ErrTruncated) {
			c.Truncated(err)
			return c.Finish(), nil
		}
		return nil, err
	}
	defer rd.Close()
	c.rep.Compression = rd.Compression().String()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return c.Finish(), nil
		}
		if errors.Is(err, tracefile.ErrTruncated) {
			c.Truncated(err)
			return c.Finish(), nil
		}
		if err != nil {
			rep := c.Finish()
			rep.Unreadable = err.Error()
			return rep, err
		}
		if rec.Elided > 0 {
			c.elided(rec, keep)
		}
		c.Packet(rec.Packet, rec.Offset)
	}
}

// elided records a packet of which fields were skipped unread (longer than
// the packet buffer): it is counted in full, its skipped fields are not
// checked, and the report says so.
func (c *Checker) elided(rec tracefile.Record, keep int) {
	c.rep.ElidedPackets++
	c.rep.ElidedBytes += rec.Elided
	c.rep.Bytes += int64(rec.Size - len(rec.Packet)) // Packet adds the bytes kept
	c.finding(CodePacketFieldsSkipped, SeverityCheck, seqKey{}, -1, 1, rec.Offset,
		fmt.Sprintf("packets longer than the %d-byte packet buffer: fields that did not fit were skipped unread and not checked (e.g. %d bytes in %d field(s) of a %d-byte packet; raise with --max-packet-buffer)",
			keep, rec.Elided, rec.ElidedFields, rec.Size))
}

// Truncated records that the input ended inside a packet.
func (c *Checker) Truncated(err error) {
	c.rep.Truncated = true
	c.finding(CodeTruncated, SeverityCheck, seqKey{}, -1, 1, -1, "the file ends inside a packet ("+err.Error()+"); everything before it is checked")
}

func (c *Checker) stat(name string, index int, sev string, delta int64) {
	k := statKey{name, index}
	s := c.stats[k]
	if s == nil {
		s = &Stat{Name: name, Index: index, Severity: sev}
		c.stats[k] = s
	}
	s.Value += delta
}

func (c *Checker) setStat(name string, index int, sev string, v int64) {
	c.stat(name, index, sev, 0)
	c.stats[statKey{name, index}].Value = v
}

func (c *Checker) finding(code, sev string, k seqKey, index int, count, off int64, msg string) {
	fk := findingKey{code, k, index}
	f := c.findings[fk]
	if f == nil {
		f = &Finding{Code: code, Severity: sev, Sequence: k.seq, Machine: k.machine, Index: index, Offset: off, Message: msg}
		c.findings[fk] = f
	}
	f.Count += count
	if off >= 0 && (f.Offset < 0 || off < f.Offset) {
		f.Offset = off // deferred findings (iids, clocks) arrive out of file order
	}
}

// Memory bounds: a Checker tracks at most this many interned ids per
// generation and tracks; beyond them (only a hostile or broken trace gets
// there) it reports not_modelled and predicts less. The number of
// sequences tracked is Options.MaxSequences.
const (
	maxIIDsPerSequence = 1 << 22
	maxTracks          = 1 << 22
)

// DefaultMaxSequences is how many sequences a Checker tracks one by one
// unless Options.MaxSequences says otherwise.
const DefaultMaxSequences = 100_000

// beyondSeq is the sequence id of the one row that stands, per machine,
// for the sequences beyond Options.MaxSequences (SequenceReport.Summarised).
const beyondSeq = ^uint32(0)

// sequence returns the state of sequence k. Past Options.MaxSequences
// tracked sequences, a new sequence (other than 0 and the service's) gets
// its machine's summary row instead: per-sequence state (incremental
// state, interned ids, defaults) starts afresh with each of its packets,
// assumed valid, and lookups it cannot resolve within the packet are not
// reported. Its packets are counted, the global checks (clocks, tracks,
// stats, strict decoding) still run, and the report says how many
// sequences were summarised.
func (c *Checker) sequence(k seqKey) *sequence {
	s := c.seqs[k]
	if s != nil {
		return s
	}
	if len(c.seqs) >= c.opts.MaxSequences && k.seq > serviceSequence {
		return c.beyondSequence(k)
	}
	s = &sequence{key: k, rep: SequenceReport{ID: k.seq, Machine: k.machine}, gen: newGeneration()}
	c.seqs[k] = s
	c.order = append(c.order, s)
	return s
}

// beyondSequence returns k's machine's summary row, reset for one packet.
func (c *Checker) beyondSequence(k seqKey) *sequence {
	c.rep.SummarisedPackets++
	s := c.beyond[k.machine]
	if s == nil {
		bk := seqKey{machine: k.machine, seq: beyondSeq}
		s = &sequence{key: bk, rep: SequenceReport{ID: beyondSeq, Machine: k.machine, Summarised: true}, gen: newGeneration()}
		if c.beyond == nil {
			c.beyond = map[uint32]*sequence{}
			c.beyondKeys = new(distinct.Counter)
		}
		c.beyond[k.machine] = s
		c.order = append(c.order, s)
	}
	c.beyondKeys.Add(uint64(k.machine)<<32 | uint64(k.seq))
	resetBeyond(s)
	return s
}

// resetBeyond forgets a summary row's per-sequence state: the next packet
// may belong to any of the sequences it stands for.
func resetBeyond(s *sequence) {
	s.seen, s.valid = true, true
	s.defaults.present = false
	clear(s.gen.iids)
	s.gen.pending, s.gen.first = nil, nil
}

func newGeneration() *generation {
	return &generation{iids: map[internKey]struct{}{}}
}

// Packet processes one TracePacket found at offset off, following the
// per-packet steps of trace-processor-import.md §0.
func (c *Checker) Packet(pkt []byte, off int64) {
	c.rep.Packets++
	c.rep.Bytes += int64(len(pkt))
	if c.rep.Fatal != "" {
		return // trace_processor stopped at the fatal packet
	}
	if !c.opts.NoStrict {
		if err := strictCheck(pkt); err != nil {
			c.finding(CodeStrictDecode, SeverityCheck, seqKey{}, -1, 1, off,
				"strict protobuf decoders (protoc --decode, Python) reject the whole trace: "+err.Error())
		}
	}
	info, err := tracefile.DecodePacket(pkt)
	if err != nil {
		c.finding(CodeMalformedPacket, SeverityCheck, seqKey{}, -1, 1, off, err.Error())
		return
	}
	if info.PayloadField == tracefile.FieldCompressedPackets || info.PayloadField == tracefile.FieldZstdCompressedPackets {
		c.finding(CodeNotModelled, SeverityCheck, seqKey{}, -1, 1, off,
			"compressed_packets are not decompressed by check: the packets inside them are not predicted")
	}
	// Step 1: machine routing. Step 2: ProtoVM.
	k := seqKey{info.MachineID, info.SequenceID}
	c.route(info.MachineID, info.PayloadField)
	s := c.sequence(k)
	s.rep.Packets++
	replaced := false
	switch {
	case info.PayloadField == tracefile.FieldTraceProvenance:
		c.provenancePacket(info.Payload)
	case info.PayloadField == tracefile.FieldProtoVMs:
		c.protoVMsPacket(info.Payload, k.machine, off)
	case len(s.vms) > 0 && info.SequenceID != 0:
		if repl, ok := c.patch(s, pkt, &info, off); ok {
			pkt, replaced = repl, true
			if info, err = tracefile.DecodePacket(pkt); err != nil {
				c.finding(CodeMalformedPacket, SeverityCheck, k, -1, 1, off, "ProtoVM state: "+err.Error())
				return
			}
		}
	}
	c.tokenize(s, pkt, &info, off, replaced)
}

// tokenize runs steps 3–9 on a (possibly replaced) packet.
// A replaced packet is processed but not counted as imported: its own
// contents are gone.
func (c *Checker) tokenize(s *sequence, pkt []byte, info *tracefile.PacketInfo, off int64, replaced bool) {
	k := s.key
	noSeq := info.SequenceID == 0
	// Step 3: loss counting (not on the first packet seen on the sequence).
	if info.PreviousPacketDropped != 0 && s.seen {
		s.rep.PacketLoss++
		for bit := 1; bit <= len(lossCauseNames); bit++ {
			if info.PreviousPacketDropped&(1<<bit) != 0 {
				if s.rep.LossCauses == nil {
					s.rep.LossCauses = map[string]int64{}
				}
				s.rep.LossCauses[lossCauseNames[bit-1]]++
			}
		}
	}
	s.seen = true
	// Step 5: CLEARED, else loss.
	cleared := info.SequenceFlags&1 != 0
	switch {
	case cleared && noSeq:
		c.stat("incremental_state_cleared_missing_sequence_id", -1, SeverityError, 1)
	case cleared:
		c.closeGeneration(s)
		s.gen = newGeneration()
		s.valid = true
		s.defaults.present = false
	case info.PreviousPacketDropped != 0 && noSeq:
		c.stat("previous_packet_dropped_missing_sequence_id", -1, SeverityError, 1)
	case info.PreviousPacketDropped != 0:
		c.closeGeneration(s)
		old := s.gen
		s.gen = newGeneration()
		for id := range old.iids {
			s.gen.iids[id] = struct{}{}
		}
		s.valid = false
	}
	// Step 6: defaults, then interned data.
	defaults, interned := topFields(pkt)
	if defaults != nil {
		if noSeq {
			c.stat("trace_packet_defaults_missing_sequence_id", -1, SeverityError, 1)
		} else {
			c.setDefaults(s, defaults)
		}
	}
	if interned != nil {
		switch {
		case noSeq:
			c.stat("interned_data_missing_sequence_id", -1, SeverityError, 1)
		case !s.valid:
			c.stat("interned_data_skipped_incremental_state_invalid", -1, SeverityNotice, 1)
			s.rep.InternedSkipped++
			c.finding("interned_data_skipped_incremental_state_invalid", SeverityNotice, k, -1, 1, off,
				"interned data on a sequence whose incremental state is invalid (no CLEARED since its start or last loss) is dropped")
		default:
			c.intern(s, pkt)
		}
	}
	// Step 7: packets consumed at tokenization.
	switch info.PayloadField {
	case tracefile.FieldClockSnapshot:
		c.clockSnapshot(s, info.Payload, off)
		return
	case tracefile.FieldServiceEvent:
		c.converting(k.machine, off) // always converted (BOOTTIME by default)
		c.serviceTime(info)
		return
	case tracefile.FieldExtensionDescriptor:
		return
	case tracefile.FieldRemoteClockSync:
		c.remoteClockSync(k, info.Payload, off)
		return
	case tracefile.FieldTraceStats:
		c.traceStats(info.Payload, k.machine)
		c.serviceTime(info)
	}
	// Step 8: the NEEDS skip.
	if info.SequenceFlags&2 != 0 {
		if noSeq {
			c.rep.Fatal = fmt.Sprintf("packet at offset %d: TracePacket specified SEQ_NEEDS_INCREMENTAL_STATE but the TraceWriter's sequence_id is zero", off)
			c.finding(CodeNeedsOnSequenceZero, SeverityFatal, k, -1, 1, off, c.rep.Fatal)
			return
		}
		s.rep.NeedsTotal++
		if !s.valid {
			s.rep.NeedsSkipped++
			c.stat("packet_skipped_seq_needs_incremental_state_invalid", -1, SeverityNotice, 1)
			c.finding("packet_skipped_seq_needs_incremental_state_invalid", SeverityNotice, k, -1, 1, off,
				"packets flagged SEQ_NEEDS_INCREMENTAL_STATE on a sequence without a CLEARED packet since its start or last loss are dropped")
			return
		}
	}
	if info.PayloadField == tracefile.FieldThreadDescriptor && !s.valid {
		c.stat("thread_descriptor_skipped_incremental_state_invalid", -1, SeverityNotice, 1)
		c.finding("thread_descriptor_skipped_incremental_state_invalid", SeverityNotice, k, -1, 1, off,
			"a legacy thread_descriptor on a sequence with invalid incremental state is ignored")
		return
	}
	// Step 9: config, timestamp, module tokenizers.
	switch info.PayloadField {
	case tracefile.FieldTraceConfig:
		c.traceConfig(info.Payload, off)
	case tracefile.FieldSystemInfo:
		c.systemInfo(info.Payload)
	}
	clock := info.TimestampClockID
	if clock == 0 && s.defaults.present {
		clock = s.defaults.clockID
	}
	clock = c.packetClock(k, clock, info.HasTimestamp, off)
	ts := info.Timestamp
	if info.HasTimestamp && clock != 0 {
		if clock >= 64 && clock < 128 && noSeq {
			c.rep.Fatal = fmt.Sprintf("packet at offset %d: sequence-scoped clock %d on a packet without trusted_packet_sequence_id", off, clock)
			c.finding(CodeSeqClockOnSequenceZero, SeverityFatal, k, -1, 1, off, c.rep.Fatal)
			return
		}
		// In the clock's own domain: unit applied, an incremental delta
		// added to the last value (clocks.go).
		ts = c.inDomain(k, clock, ts)
	}
	switch info.PayloadField {
	case tracefile.FieldTrackEvent:
		if !c.trackEvent(s, info, off) {
			s.rep.Dropped++
			return
		}
	case tracefile.FieldTrackDescriptor:
		c.trackDescriptor(info.Payload)
	}
	if info.HasTimestamp && clock != 0 {
		// Unconvertible now: deferred to the end of the file (finishClocks).
		if ck := c.clockKeyFor(k, clock); !c.convertible(ck) {
			p := c.pendingClocks[pendingKey{ck, k}]
			if p == nil {
				p = &pendingClock{seq: k, off: off}
				c.pendingClocks[pendingKey{ck, k}] = p
			}
			p.count++
		}
	}
	// A packet without a timestamp gets trace_processor's "now" (the
	// latest timestamp seen): never outside the session by itself.
	if info.HasTimestamp && !isServicePayload(info.PayloadField) {
		c.producerTime(s, k, clock, ts, off)
	}
	if !replaced {
		s.rep.Imported++
	}
}

func isServicePayload(f int32) bool {
	switch f {
	case tracefile.FieldTraceStats, tracefile.FieldServiceEvent, tracefile.FieldClockSnapshot, tracefile.FieldTraceConfig,
		tracefile.FieldSystemInfo, tracefile.FieldTraceUUID, tracefile.FieldTraceProvenance, tracefile.FieldProtoVMs,
		tracefile.FieldSynchronizationMarker:
		return true
	}
	return false
}

// topFields returns the last trace_packet_defaults and the interned_data
// payload of a packet (nil when absent). Several interned_data occurrences
// merge, as protobuf merges repeated occurrences of a message field: they
// are returned as the whole packet to walk again (rare).
func topFields(pkt []byte) (defaults, interned []byte) {
	_ = walk(pkt, func(f field) bool {
		if f.typ != protowire.BytesType {
			return true
		}
		switch f.num {
		case tracefile.FieldTracePacketDefaults:
			defaults = f.payload
		case tracefile.FieldInternedData:
			interned = f.payload
		}
		return true
	})
	return defaults, interned
}

func (c *Checker) setDefaults(s *sequence, b []byte) {
	s.defaults.present = true
	s.defaults.clockID = 0
	s.defaults.hasTrack = false
	_ = walk(b, func(f field) bool {
		switch {
		case f.num == defClockID && f.typ == protowire.VarintType:
			s.defaults.clockID = uint32(f.v)
		case f.num == defTrackEvent && f.typ == protowire.BytesType:
			_ = walk(f.payload, func(g field) bool {
				if g.num == tedTrackUUID && g.typ == protowire.VarintType {
					s.defaults.trackUUID, s.defaults.hasTrack = g.v, true
				}
				return true
			})
		}
		return true
	})
}

// intern stores every interned_data entry of pkt in the sequence's current
// generation (the first definition of an iid wins, so only presence
// matters).
func (c *Checker) intern(s *sequence, pkt []byte) {
	_ = walk(pkt, func(top field) bool {
		if top.num != tracefile.FieldInternedData || top.typ != protowire.BytesType {
			return true
		}
		_ = walk(top.payload, func(e field) bool {
			if e.typ != protowire.BytesType {
				return true
			}
			iid, has := uint64(0), false
			_ = walk(e.payload, func(g field) bool {
				if g.num == 1 && g.typ == protowire.VarintType {
					iid, has = g.v, true
				}
				return true
			})
			if !has {
				c.stat("interned_data_tokenizer_errors", -1, SeverityInfo, 1)
				return true
			}
			ik := internKey{e.num, iid}
			if len(s.gen.iids) >= maxIIDsPerSequence {
				c.finding(CodeNotModelled, SeverityCheck, s.key, -1, 1, -1,
					fmt.Sprintf("more than %d interned ids in one generation: later ones are not tracked", maxIIDsPerSequence))
				return false
			}
			s.gen.iids[ik] = struct{}{}
			if s.gen.pending != nil {
				delete(s.gen.pending, ik)
			}
			return true
		})
		return true
	})
}

// lookup records an iid use; a miss stays pending until the generation
// closes.
func (c *Checker) lookup(s *sequence, field int32, iid uint64, off int64) {
	ik := internKey{field, iid}
	if _, ok := s.gen.iids[ik]; ok {
		return
	}
	g := s.gen
	if g.pending == nil {
		g.pending = map[internKey]int64{}
		g.first = map[internKey]int64{}
	}
	if _, ok := g.pending[ik]; !ok {
		if len(g.pending) >= maxIIDsPerSequence {
			c.finding(CodeNotModelled, SeverityCheck, s.key, -1, 1, -1,
				fmt.Sprintf("more than %d distinct missing iids in one generation: later ones are not tracked", maxIIDsPerSequence))
			return
		}
		g.first[ik] = off
	}
	g.pending[ik]++
}

// closeGeneration turns the generation's pending lookups into unresolved
// iids.
func (c *Checker) closeGeneration(s *sequence) {
	g := s.gen
	for ik, n := range g.pending {
		if s.rep.Unresolved == nil {
			s.rep.Unresolved = map[string]int64{}
		}
		name := internedFieldName(ik.field)
		s.rep.Unresolved[name] += n
		c.stat("interned_data_tokenizer_errors", -1, SeverityInfo, n)
		c.finding(CodeUnresolvedIID, SeverityCheck, s.key, -1, n, g.first[ik],
			fmt.Sprintf("iids that no interned_data of the packet's generation defines (e.g. %s iid %d): names come out NULL, categories unknown(<iid>)",
				name, ik.iid))
	}
	g.pending, g.first = nil, nil
}

// trackEvent applies the TrackEvent tokenizer's checks; false means the
// event is dropped.
func (c *Checker) trackEvent(s *sequence, info *tracefile.PacketInfo, off int64) bool {
	k := s.key
	if info.SequenceID == 0 {
		c.stat("track_event_missing_sequence_id", -1, SeverityError, 1)
		c.finding("track_event_missing_sequence_id", SeverityError, k, -1, 1, off, "track events without trusted_packet_sequence_id are dropped")
		return false
	}
	var (
		typ                uint64
		uuid               uint64
		hasUUID, hasValue  bool
		hasLegacyTimestamp bool
	)
	_ = walk(info.Payload, func(f field) bool {
		switch f.num {
		case teType:
			typ = f.v
		case teTrackUUID:
			uuid, hasUUID = f.v, true
		case teNameIID:
			if f.typ == protowire.VarintType {
				c.lookup(s, idEventNames, f.v, off)
			}
		case teCategoryIIDs:
			for _, v := range varints(nil, f) {
				c.lookup(s, idEventCategories, v, off)
			}
		case teCounterValue, teDoubleValue:
			hasValue = true
		case teTsDeltaUs, teTsAbsoluteUs:
			hasLegacyTimestamp = true
		}
		return true
	})
	if !hasUUID && s.defaults.present && s.defaults.hasTrack {
		uuid, hasUUID = s.defaults.trackUUID, true
	}
	switch {
	case !info.HasTimestamp && !hasLegacyTimestamp:
		c.dropEvent(k, "track_event_missing_timestamp", off, "track events without a timestamp are dropped")
		return false
	case info.HasTimestamp && int64(info.Timestamp) < 0:
		c.dropEvent(k, "track_event_invalid_timestamp", off, "track events with a negative timestamp are dropped")
		return false
	}
	switch typ {
	case teTypeCounter:
		switch {
		case !hasUUID:
			c.dropEvent(k, "track_event_counter_missing_track_uuid", off, "counter events need a track_uuid")
			return false
		case !hasValue:
			c.dropEvent(k, "track_event_counter_missing_value", off, "counter events need a value")
			return false
		}
		if _, ok := c.counterTracks[uuid]; !ok {
			c.dropEvent(k, "track_event_counter_invalid_track_uuid", off,
				"counter events whose counter track_descriptor has not been seen earlier in the file are dropped (uuid "+strconv.FormatUint(uuid, 10)+")")
			return false
		}
	case teTypeState:
		if !hasUUID {
			c.dropEvent(k, "track_event_state_missing_track_uuid", off, "state events need a track_uuid")
			return false
		}
	default:
		if hasUUID && uuid != 0 {
			if _, ok := c.described[uuid]; !ok && len(c.usedTracks) < maxTracks {
				u := c.usedTracks[uuid]
				if u.count == 0 {
					u.seq, u.off = k, off
				}
				u.count++
				c.usedTracks[uuid] = u
			}
		}
	}
	return true
}

func (c *Checker) dropEvent(k seqKey, stat string, off int64, msg string) {
	c.stat(stat, -1, SeverityError, 1)
	c.finding(stat, SeverityError, k, -1, 1, off, msg)
}

func (c *Checker) trackDescriptor(b []byte) {
	var uuid uint64
	var hasUUID, counter bool
	var process, thread []byte
	_ = walk(b, func(f field) bool {
		switch {
		case f.num == tdUUID && f.typ == protowire.VarintType:
			uuid, hasUUID = f.v, true
		case f.num == tdCounter && f.typ == protowire.BytesType:
			counter = true
		case f.num == tdProcess && f.typ == protowire.BytesType:
			process = f.payload
		case f.num == tdThread && f.typ == protowire.BytesType:
			thread = f.payload
		}
		return true
	})
	if !hasUUID {
		c.stat("track_descriptor_missing_uuid", -1, SeverityError, 1)
		c.finding("track_descriptor_missing_uuid", SeverityError, seqKey{}, -1, 1, -1, "track_descriptor without uuid")
		return
	}
	if thread != nil && !(hasVarint(thread, 1) && hasVarint(thread, 2)) {
		c.stat("track_descriptor_thread_missing_pid_tid", -1, SeverityError, 1)
		c.finding("track_descriptor_thread_missing_pid_tid", SeverityError, seqKey{}, -1, 1, -1, "thread track_descriptor without pid and tid")
	}
	if process != nil && !hasVarint(process, 1) {
		c.stat("track_descriptor_process_missing_pid", -1, SeverityError, 1)
		c.finding("track_descriptor_process_missing_pid", SeverityError, seqKey{}, -1, 1, -1, "process track_descriptor without pid")
	}
	if len(c.described) >= maxTracks {
		c.finding(CodeNotModelled, SeverityCheck, seqKey{}, -1, 1, -1,
			fmt.Sprintf("more than %d track descriptors: later ones are not tracked", maxTracks))
		return
	}
	c.described[uuid] = struct{}{}
	delete(c.usedTracks, uuid)
	if counter {
		c.counterTracks[uuid] = struct{}{}
	}
}

func hasVarint(b []byte, num int32) bool {
	found := false
	_ = walk(b, func(f field) bool {
		if f.num == num && f.typ == protowire.VarintType {
			found = true
			return false
		}
		return true
	})
	return found
}

// Finish closes every generation, evaluates the end-of-import stats and
// returns the report. The Checker must not be used afterwards.
func (c *Checker) Finish() *Report {
	r := &c.rep
	if r.Compression == "" {
		r.Compression = tracefile.CompressionNone.String()
	}
	for _, s := range c.beyond {
		resetBeyond(s) // its unresolved lookups are not reported
	}
	if r.SummarisedPackets > 0 {
		r.SummarisedSequences = int64(max(c.beyondKeys.Estimate(), 1))
		c.finding(CodeSequencesSummarised, SeverityCheck, seqKey{}, -1, r.SummarisedPackets, -1,
			fmt.Sprintf("about %d sequences beyond the %d tracked: their per-sequence checks were summarised (%d packets; raise with --max-sequences)",
				r.SummarisedSequences, c.opts.MaxSequences, r.SummarisedPackets))
	}
	r.MaxSequences = c.opts.MaxSequences
	if r.Packets == 0 && r.Unreadable == "" {
		c.finding(CodeEmptyTrace, SeverityCheck, seqKey{}, -1, 1, -1,
			"the trace holds no packet: trace_processor imports nothing (a session that wrote nothing, or a file cut before its first packet)")
	}
	for _, s := range c.order {
		c.closeGeneration(s)
	}
	c.finishClocks()
	c.finishConfig()
	for uuid, u := range c.usedTracks {
		if _, ok := c.described[uuid]; ok {
			continue
		}
		c.finding(CodeTrackNoDescriptor, SeverityCheck, u.seq, -1, u.count, u.off,
			"events on track uuids that no track_descriptor names land on implicit tracks named after the events")
	}
	for _, s := range c.order {
		if s.ts.has && c.svc.has && c.rep.ClockSnapshots > 0 && c.opts.ClockSlackNs > 0 {
			slack := uint64(c.opts.ClockSlackNs)
			lo, hi := c.svc.lo, c.svc.hi
			if s.ts.lo+slack < lo || s.ts.hi > hi+slack {
				c.finding(CodeTimestampsOutside, SeverityCheck, s.key, -1, max(s.ts.outside, 1), s.ts.firstOff,
					fmt.Sprintf("producer timestamps %d..%d ns lie outside the service's clock range %d..%d ns (slack %d ns): the UI shows them far from the rest",
						s.ts.lo, s.ts.hi, lo, hi, slack))
			}
		}
	}
	for _, vi := range c.vms {
		if vi.vm == nil {
			continue
		}
		st := vi.vm.Stats()
		r.ProtoVM.Ok += st.PatchesApplied
		r.ProtoVM.Error += st.PatchesFailed
		r.ProtoVM.Abort += st.PatchesAborted
		r.ProtoVM.StateBytes += len(vi.vm.SerializeIncrementalState(nil))
	}
	r.ProtoVM.Instances = len(c.vms)
	if c.hasTraceClock {
		r.TraceClock = c.traceClock
	}
	for _, s := range c.order {
		rep := s.rep
		rep.VMs = len(s.vms)
		r.Sequences = append(r.Sequences, rep)
		r.Imported += rep.Imported
		if s.key.seq > serviceSequence {
			r.ProducerPackets += rep.Packets
			r.ProducerImported += rep.Imported
		}
	}
	sortSequences(r.Sequences)
	for _, s := range c.stats {
		r.Stats = append(r.Stats, *s)
	}
	sortStats(r.Stats)
	for _, s := range r.Stats {
		if s.Value == 0 || s.Severity == SeverityInfo {
			continue
		}
		if c.hasStatFinding(s.Name) {
			continue
		}
		c.finding(s.Name, s.Severity, seqKey{}, s.Index, s.Value, -1, statMessage(s.Name))
	}
	for _, f := range c.findings {
		r.Findings = append(r.Findings, *f)
	}
	sortFindings(r.Findings)
	if r.Sequences == nil {
		r.Sequences = []SequenceReport{}
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	if r.Stats == nil {
		r.Stats = []Stat{}
	}
	return r
}

// hasStatFinding reports whether a per-sequence finding already stands for
// stat name.
func (c *Checker) hasStatFinding(name string) bool {
	for k := range c.findings {
		if k.code == name {
			return true
		}
	}
	return false
}

func statMessage(name string) string {
	switch {
	case name == "config_write_into_file_no_flush":
		return "write_into_file without flush_period_ms, and no system_info.tracing_service_version \"Perfetto v<major ≥ 54>.…\""
	case name == "config_write_into_file_discard":
		return "a write_into_file session with a DISCARD buffer"
	case name == "long_trace_mode_bytes_overwritten":
		return "a write_into_file session whose ring buffer overwrote unread bytes"
	case strings.HasPrefix(name, "traced_buf_"), strings.HasPrefix(name, "traced_"):
		return "from the trace_stats packet"
	case strings.HasPrefix(name, "clock_sync_failure"):
		return "timestamps in a clock that no clock_snapshot relates to the trace clock: the packets are dropped"
	case strings.HasPrefix(name, "protovm_"):
		return "ProtoVM registration or patch failure in trace_processor"
	}
	return "trace_processor stat"
}
