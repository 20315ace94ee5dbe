package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/flightrec"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/restore"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Clone snapshots (reference/service.md §11, Perfetto's CloneSession): a
// snapshot flushes the data sources, clones every buffer read-only with
// its ProtoVM and sequence-restore state frozen at that instant, and
// reads the clone back on its own goroutine into a separate, complete
// trace (its own clock snapshot, trace_config, uuid, provenance,
// system_info, ProtoVM states, the clone_snapshot_trigger packet, restore
// packets and TraceStats) while the live session keeps recording.
//
// The pause budget decides the design. Copying a full ring into fresh
// memory costs ~750 ms for 256 MiB here, nearly all page faults, which
// would stall commits and make producers lose data. So:
//   - the clone's memory is mmapped with MAP_POPULATE on a goroutine of
//     its own (flightrec.CloneMem) before the clone begins: the faults happen
//     there, never on the service goroutine;
//   - the clone captures cursors, sequence states, ProtoVM and restore
//     state at once (O(sequences + chunks), not O(bytes)), then copies the
//     memory in 1 MiB slices between commits (buffer.PendingClone), with
//     copy-before-overwrite for whatever the live session writes first;
//   - the memory is unmapped when the snapshot is written, so the process
//     is back to 1× the buffers (a reused spare would keep it at 2×).
// A reused pre-faulted spare alone would still copy 256 MiB in one pause
// (~25 ms of memcpy on an idle machine, several times that on a loaded
// one) and double the resident memory for the whole session.

// Snapshot tunables.
const (
	// DefaultSnapshotsInFlight caps snapshots being taken or written at
	// once; further requests are refused and counted, never queued.
	DefaultSnapshotsInFlight = 2
	// snapshotStepBytes is what one turn of the service loop copies.
	snapshotStepBytes = 2 * buffer.CloneSliceSize
	// DefaultSnapshotPattern names a file sink's snapshot files
	// (sinks.DefaultSnapshotPattern).
	DefaultSnapshotPattern = sinks.DefaultSnapshotPattern
)

// SnapshotRequest asks for one clone snapshot.
type SnapshotRequest struct {
	// Trigger names the trigger that asked for it ("" → "manual").
	Trigger string
	// Producer is the name of the producer that fired the trigger, if any.
	Producer string
	// CloneTarget is told to the data sources in the snapshot's
	// TRACE_CLONE flush (Perfetto's CloneSession for_bugreport: BUGREPORT).
	CloneTarget plugins.FlushCloneTarget
	// Path, when set, is the one file the snapshot is written to (the
	// CLI's snapshot -o); otherwise every sink gets the snapshot as a
	// trace of its own (a file sink in a file named by
	// DefaultSnapshotPattern; see snapshotLanes).
	Path string
}

// SnapshotResult is what one snapshot did.
type SnapshotResult struct {
	N       int      // number in the session, from 1
	Trigger string   // the trigger name written into the snapshot
	Files   []string // files written
	Packets uint64   // packets read back from the clone (each destination gets them through its filter)
	Bytes   uint64
	// Pause is the service goroutine's longest uninterrupted time spent
	// on this snapshot (capture or one copy step).
	Pause time.Duration
	Err   error
}

// ErrSnapshotsBusy is returned for a snapshot refused because
// DefaultSnapshotsInFlight snapshots are already running.
var ErrSnapshotsBusy = errors.New("pipeline: too many snapshots in flight")

// Snapshot phases on the service goroutine.
const (
	snapAllocating = iota
	snapWantFlush
	snapFlushing
	snapCopying
)

type snapshot struct {
	n       int
	req     SnapshotRequest
	reply   chan SnapshotResult
	phase   int
	flushID uint64
	when    uint64 // boot time of the request (the trigger's timestamp)

	mems    [][]byte
	release []func()
	err     error

	pending  []*buffer.PendingClone // nil for a buffer moved into the snapshot
	moved    []*buffer.TraceBuffer  // transfer_on_clone: the buffer itself
	restores []*restore.Set
	preamble [][]byte // service packets, in order
	stats    tracefile.TraceStats
	seqIDs   map[uint32]uint32
	nextSeq  uint32
	uid      int32
	readDone bool // the writer read the whole clone (its restores hold the moved states)
	pause    time.Duration
	result   SnapshotResult // set by the writer
}

// snapState is the service's snapshot bookkeeping.
type snapState struct {
	req        chan *snapshot // requests from any goroutine
	mem        chan *snapshot // memory allocated (or failed)
	done       chan *snapshot // a snapshot's writer finished
	step       chan struct{}  // closed: a clone is copying (always ready)
	active     []*snapshot    // past allocation, before writing
	inFlight   int            // requested and not yet written
	n          int            // snapshots started
	maxPauseNs atomic.Int64
	cloneBytes atomic.Int64 // clone memory mapped for snapshots now

	taken, failed, refused atomic.Uint64
}

func (st *snapState) init() {
	st.req = make(chan *snapshot, 4*DefaultSnapshotsInFlight)
	st.mem = make(chan *snapshot, DefaultSnapshotsInFlight)
	st.done = make(chan *snapshot, DefaultSnapshotsInFlight)
	st.step = make(chan struct{})
	close(st.step)
}

// Snapshot asks the running session for a clone snapshot. It never
// blocks; the result arrives on the returned channel once the snapshot
// is written (or refused, or failed). Safe for concurrent use.
func (s *Service) Snapshot(req SnapshotRequest) <-chan SnapshotResult {
	if req.Trigger == "" {
		req.Trigger = "manual"
	}
	sn := &snapshot{req: req, reply: make(chan SnapshotResult, 1), when: bootNanos()}
	select {
	case s.snap.req <- sn:
	default:
		s.snap.refused.Add(1)
		s.snapshotRefused(req.Trigger, ErrSnapshotsBusy)
		sn.reply <- SnapshotResult{Trigger: req.Trigger, Err: ErrSnapshotsBusy}
	}
	return sn.reply
}

// snapRequested starts a snapshot on the service goroutine: refused when
// the cap is reached or the session is ending, else its memory is
// allocated on a goroutine of its own.
func (s *Service) snapRequested(sn *snapshot) {
	switch {
	case s.phase != phaseRecording:
		err := errors.New("pipeline: the session is ending")
		s.snap.refused.Add(1)
		s.snapshotRefused(sn.req.Trigger, err)
		sn.reply <- SnapshotResult{Trigger: sn.req.Trigger, Err: err}
		return
	case s.snap.inFlight >= DefaultSnapshotsInFlight:
		s.snap.refused.Add(1)
		s.snapshotRefused(sn.req.Trigger, ErrSnapshotsBusy)
		sn.reply <- SnapshotResult{Trigger: sn.req.Trigger, Err: ErrSnapshotsBusy}
		return
	}
	s.snap.inFlight++
	s.snap.n++
	sn.n = s.snap.n
	sizes := make([]int, len(s.buffers))
	for i, bs := range s.buffers {
		if !s.cfg.Buffers[i].TransferOnClone { // a moved buffer needs no copy
			sizes[i] = bs.buf.Size()
		}
	}
	go func() {
		for _, n := range sizes {
			m, rel, err := flightrec.CloneMem(n)
			if err != nil {
				sn.err = fmt.Errorf("allocating %d bytes for the clone: %w", n, err)
				break
			}
			sn.mems = append(sn.mems, m)
			s.snap.cloneBytes.Add(int64(n))
			sn.release = append(sn.release, func() { rel(); s.snap.cloneBytes.Add(-int64(n)) })
		}
		s.snap.mem <- sn
	}()
}

// snapAllocated runs when a snapshot's memory is ready.
func (s *Service) snapAllocated(sn *snapshot) {
	if sn.err != nil || s.phase != phaseRecording {
		if sn.err == nil {
			sn.err = errors.New("pipeline: the session ended before the snapshot was taken")
		}
		s.snapFinished(sn, SnapshotResult{})
		return
	}
	sn.phase = snapWantFlush
	s.snap.active = append(s.snap.active, sn)
}

// snapAdvance moves snapshots waiting for a flush along; it runs before
// each wait of the service loop.
func (s *Service) snapAdvance() {
	for _, sn := range s.snap.active {
		switch sn.phase {
		case snapWantFlush:
			// A buffer has one clone copying at a time: the next
			// snapshot flushes once the previous one is copied.
			if s.flush == nil && s.snapCopying() == nil && !s.transferPending() {
				for i, bs := range s.buffers {
					if s.cfg.Buffers[i].ClearBeforeClone {
						// Dropped: the snapshot holds what the flush writes.
						if old, err := s.replaceBuffer(bs); err != nil {
							s.logf("snapshot %d: buffer %d not cleared before the clone: %v", sn.n, i, err)
						} else {
							old.Close()
						}
					}
				}
				s.startFlushFlags(false, plugins.NewFlushFlags(plugins.FlushReasonTraceClone,
					plugins.FlushInitiatorTraced, sn.req.CloneTarget))
				sn.flushID = s.flushID
				sn.phase = snapFlushing
			}
		case snapFlushing:
			if s.flush == nil || s.flush.id != sn.flushID {
				s.snapCapture(sn)
			}
		}
	}
}

// snapCopying reports whether a clone is copying (the loop then steps it).
func (s *Service) snapCopying() <-chan struct{} {
	for _, sn := range s.snap.active {
		if sn.phase == snapCopying {
			return s.snap.step
		}
	}
	return nil
}

// snapCapture clones everything of the session at this instant but the
// buffer memory, which the loop then copies in steps.
func (s *Service) snapCapture(sn *snapshot) {
	t0 := time.Now()
	sn.phase = snapCopying
	sn.uid = s.uid
	clocks := snapshotClocks()
	var pre [][]byte
	add := func(p []byte) { pre = append(pre, append([]byte(nil), p...)) }
	p := tracefile.AppendTimestamp(s.servicePacket(), clocks[0].Timestamp)
	add(tracefile.AppendClockSnapshot(p, clocks, tracefile.ClockBoottime))
	add(tracefile.AppendSyncMarkerPacket(nil, s.uid))
	add(appendTraceConfig(s.servicePacket(), s.cfg))
	var u [16]byte
	s.snapUUID(&u, sn.n)
	add(tracefile.AppendTraceUUID(s.servicePacket(), int64(binary.BigEndian.Uint64(u[:8])), int64(binary.BigEndian.Uint64(u[8:]))))
	seqs := make([][]tracefile.ProvenanceSequence, len(s.buffers))
	for i, bs := range s.buffers {
		for _, ws := range bs.buf.WriterStats() {
			s.sequenceID(bs, ws.ProducerID, ws.WriterID)
		}
		seqs[i] = bs.provenance
	}
	add(tracefile.AppendTraceProvenance(s.servicePacket(), seqs))
	add(appendSystemInfo(s.servicePacket()))
	add(appendTriggerPacket(s.servicePacket(), fieldCloneSnapshotTrigger, sn.when, sn.req.Trigger, sn.req.Producer))
	// As Perfetto's clone carries the session's received triggers: every
	// trigger that acted so far, whether or not the live trace has its
	// packet yet.
	for _, a := range s.trig.history {
		add(appendTriggerPacket(s.servicePacket(), fieldTrigger, a.ts, a.name, a.producer))
	}
	sn.moved = make([]*buffer.TraceBuffer, len(s.buffers))
	for i, bs := range s.buffers {
		if s.cfg.Buffers[i].TransferOnClone {
			moved, err := s.replaceBuffer(bs)
			if err != nil { // no memory for the empty buffer: keep this one
				s.snapCaptureFailed(sn, err)
				return
			}
			sn.moved[i] = moved
			bs.restore.BeginTransfer() // flightrec_transfer.go
			sn.pending = append(sn.pending, nil)
			if bs.vms != nil && bs.vms.Len() > 0 {
				add(bs.vms.CloneReadOnly().AppendProtoVMsField(s.servicePacket()))
			}
			sn.restores = append(sn.restores, bs.restore.CloneForSnapshot())
			continue
		}
		pc, err := bs.buf.BeginClone(sn.mems[i])
		if err != nil { // only one clone per buffer at a time: refuse this one
			s.snapCaptureFailed(sn, err)
			return
		}
		sn.pending = append(sn.pending, pc)
		if bs.vms != nil && bs.vms.Len() > 0 {
			add(bs.vms.CloneReadOnly().AppendProtoVMsField(s.servicePacket()))
		}
		sn.restores = append(sn.restores, bs.restore.CloneForSnapshot())
	}
	s.scratch = s.scratch[:0]
	sn.preamble = pre
	sn.stats = s.traceStats()
	sn.seqIDs = make(map[uint32]uint32, len(s.seqIDs))
	for k, v := range s.seqIDs {
		sn.seqIDs[k] = v
	}
	sn.nextSeq = s.nextSeqID
	s.snapPaused(sn, time.Since(t0))
}

// snapCaptureFailed ends a snapshot whose capture failed half-way.
func (s *Service) snapCaptureFailed(sn *snapshot, err error) {
	for _, q := range sn.pending {
		if q != nil {
			q.Abandon()
		}
	}
	sn.pending = nil
	sn.err = err
	s.snapRemove(sn)
	s.snapFinished(sn, SnapshotResult{})
}

// snapStep copies the next slices of every copying clone and hands the
// finished snapshots to their writers.
func (s *Service) snapStep() {
	for _, sn := range s.snap.active {
		if sn.phase != snapCopying {
			continue
		}
		t0 := time.Now()
		done := true
		budget := snapshotStepBytes
		for _, pc := range sn.pending {
			if pc == nil || pc.Done() {
				continue
			}
			if budget <= 0 {
				done = false
				break
			}
			r := pc.Remaining()
			if !pc.Step(budget) {
				done = false
			}
			budget -= min(r, budget)
		}
		s.snapPaused(sn, time.Since(t0))
		if done {
			s.snapRemove(sn)
			go s.writeSnapshot(sn)
			return // s.snap.active changed
		}
		return // one snapshot per turn keeps the turn short
	}
}

func (s *Service) snapPaused(sn *snapshot, d time.Duration) {
	sn.pause = max(sn.pause, d)
	if int64(d) > s.snap.maxPauseNs.Load() {
		s.snap.maxPauseNs.Store(int64(d))
	}
}

func (s *Service) snapRemove(sn *snapshot) {
	for i, x := range s.snap.active {
		if x == sn {
			s.snap.active = append(s.snap.active[:i], s.snap.active[i+1:]...)
			return
		}
	}
}

// snapFinished ends a snapshot on the service goroutine (failed before
// writing) or is called through s.snap.done once written.
func (s *Service) snapFinished(sn *snapshot, res SnapshotResult) {
	for _, rel := range sn.release {
		rel()
	}
	sn.release = nil
	s.endTransfers(sn)
	for _, m := range sn.moved { // read (or never to be): give the memory back
		if m != nil {
			m.Close()
		}
	}
	s.snap.inFlight--
	res.N, res.Trigger, res.Pause = sn.n, sn.req.Trigger, sn.pause
	if sn.err != nil && res.Err == nil {
		res.Err = sn.err
	}
	if res.Err != nil {
		s.snap.failed.Add(1)
		s.logf("snapshot %d (%s) failed, the session goes on: %v", sn.n, sn.req.Trigger, res.Err)
	} else {
		s.snap.taken.Add(1)
	}
	sn.reply <- res
}

// snapEnd abandons the clones still copying and waits (bounded) for the
// snapshots being written; it runs once the session stopped recording.
func (s *Service) snapEnd() {
	for _, sn := range s.snap.active {
		for _, pc := range sn.pending {
			if pc != nil {
				pc.Abandon()
			}
		}
		if sn.err == nil {
			sn.err = errors.New("pipeline: the session ended before the snapshot was complete")
		}
		s.snapFinished(sn, SnapshotResult{})
	}
	s.snap.active = nil
	deadline := time.NewTimer(sinkCloseTime)
	defer deadline.Stop()
	for s.snap.inFlight > 0 {
		select {
		case sn := <-s.snap.mem:
			if sn.err == nil {
				sn.err = errors.New("pipeline: the session ended before the snapshot was taken")
			}
			s.snapFinished(sn, SnapshotResult{})
		case sn := <-s.snap.done:
			s.snapFinished(sn, sn.result)
		case <-deadline.C:
			s.logf("%d snapshot(s) still being written after %v; not waiting for them", s.snap.inFlight, sinkCloseTime)
			return
		}
	}
}

// snapUUID derives the snapshot's trace uuid from the session's: a
// snapshot is a trace of its own.
func (s *Service) snapUUID(u *[16]byte, n int) {
	*u = s.uuidBytes()
	u[15] ^= byte(n)
	u[14] ^= byte(n >> 8)
	u[0] ^= 0x80
}

// appendTriggerPacket appends a trigger (46) or clone_snapshot_trigger
// (113) field: Trigger{trigger_name 1, producer_name 2,
// trusted_producer_uid 3}, with the packet's timestamp first.
func appendTriggerPacket(dst []byte, field protowire.Number, ts uint64, name, producer string) []byte {
	dst = tracefile.AppendTimestamp(dst, ts)
	var t []byte
	t = protowire.AppendTag(t, 1, protowire.BytesType)
	t = protowire.AppendString(t, name)
	if producer != "" {
		t = protowire.AppendTag(t, 2, protowire.BytesType)
		t = protowire.AppendString(t, producer)
	}
	dst = protowire.AppendTag(dst, field, protowire.BytesType)
	return protowire.AppendBytes(dst, t)
}

// snapshotLanes opens where a snapshot goes, each sink in a lane of its
// own that blocks when full (the snapshot's goroutine may wait; a
// snapshot drops nothing) and applies the session sink's filter:
//   - the request's Path alone, when set (the CLI's snapshot -o);
//   - else one per configured sink: a file sink's file beside its own,
//     named by sinks.DefaultSnapshotPattern; any other sink type opened
//     once more for the snapshot, as a trace of its own (Env.Snapshot,
//     the snapshot's uuid), which its receiver stores separately;
//   - and Options.SnapshotSink's, if set.
//
// It returns the lanes opened and the files among them; a destination
// that cannot be opened is an error, the others are still used.
func (s *Service) snapshotLanes(sn *snapshot) (lanes []*sinks.Lane, files []string, err error) {
	addLane := func(sk sinks.Sink, name, dest string, sc *sinks.Config) {
		lc := sinks.LaneConfig{Name: name, Destination: dest, Block: true, LaneOptions: sinks.LaneOptions{Logger: s.opts.Logger}}
		if sc != nil && sc.Filter != "" {
			f, ferr := sinks.NewFilter(sc.Filter) // checked when the config was loaded
			if ferr != nil {
				err = errors.Join(err, fmt.Errorf("snapshot to %s: filter: %w", name, ferr))
				_ = sk.Close(context.Background())
				return
			}
			lc.Filter, lc.FilterDrop = f, sc.FilterError != sinks.FilterErrorKeep
		}
		lanes = append(lanes, sinks.NewLane(sk, lc))
	}
	openFile := func(path string, sc *sinks.Config) {
		f, ferr := sinks.NewFile(sinks.FileOptions{Path: path, Compression: compressionOfName(path), FsyncPeriod: -1})
		if ferr != nil {
			err = errors.Join(err, fmt.Errorf("snapshot %s: %w", path, ferr))
			return
		}
		files = append(files, path)
		addLane(f, "file "+path, path, sc)
	}
	if s.opts.SnapshotSink != nil {
		sk, serr := s.opts.SnapshotSink(sn.n, sn.req.Trigger)
		if serr != nil {
			err = errors.Join(err, serr)
		} else {
			addLane(sk, "Options.SnapshotSink", fmt.Sprintf("%T", sk), nil)
		}
	}
	if sn.req.Path != "" {
		openFile(sn.req.Path, nil)
		return lanes, files, err
	}
	if s.opts.Sinks != nil { // sinks given as values: no config to open again
		return lanes, files, err
	}
	var uuid [16]byte
	s.snapUUID(&uuid, sn.n)
	env := sinks.Env{SessionUUID: uuid, Now: time.Now(), Logger: s.opts.Logger,
		Snapshot: sinks.Snapshot{Of: s.uuidBytes(), N: uint32(sn.n), Trigger: sn.req.Trigger}}
	for i, sc := range s.cfg.Sinks {
		if i >= len(s.lanes) {
			break
		}
		live := s.lanes[i]
		if _, ok := live.Sink().(*sinks.FileSink); ok {
			if live.Destination() != sinks.StdoutPath {
				openFile(sinks.SnapshotName(sinks.DefaultSnapshotPattern, live.Destination(), uint32(sn.n), sn.req.Trigger), &sc)
			}
			continue
		}
		b, berr := sc.Build()
		var sk sinks.Sink
		if berr == nil {
			sk, berr = b.Open(env)
		}
		if berr != nil {
			err = errors.Join(err, fmt.Errorf("snapshot to %s: %w", live.Name(), berr))
			continue
		}
		addLane(sk, live.Name()+fmt.Sprintf(" (snapshot %d)", sn.n), live.Destination(), &sc)
	}
	return lanes, files, err
}

// writeSnapshot reads the finished clone back (its own goroutine) and
// writes it to each destination.
func (s *Service) writeSnapshot(sn *snapshot) {
	defer func() { s.snap.done <- sn }()
	clones := make([]*buffer.TraceBuffer, len(sn.pending))
	for i, pc := range sn.pending {
		if pc == nil {
			clones[i] = sn.moved[i]
		} else {
			clones[i] = pc.Clone()
		}
	}
	lanes, files, oerr := s.snapshotLanes(sn)
	sn.result.Files, sn.result.Err = files, oerr
	if len(lanes) == 0 && sn.result.Err == nil {
		sn.result.Err = errors.New("pipeline: no destination for the snapshot (no sink, no -o path)")
	}
	ctx := context.Background()
	// Every lane shares each batch; the reader reuses it once all of
	// them released it. Without lanes the clone is still read: a
	// transferred buffer's states go back to the live fold.
	released := make(chan struct{}, 1)
	offer := func(it *sinks.Item) {
		if len(lanes) == 0 {
			return
		}
		it.SetRelease(func() { released <- struct{}{} })
		it.Hold(len(lanes))
		for _, l := range lanes {
			l.Offer(ctx, it)
		}
		<-released
	}
	r := snapReader{sn: sn, clones: clones}
	r.read(func(it *sinks.Item) {
		for _, p := range it.Packets {
			sn.result.Packets++
			sn.result.Bytes += uint64(len(p))
		}
		offer(it)
	})
	sn.readDone = true
	// The TraceStats ends each destination, with that lane's counters.
	st := sn.stats
	tp := tracefile.TracepipeStats{}
	if st.Tracepipe != nil {
		tp = *st.Tracepipe
	}
	tp.SequenceRestores = r.restores
	st.Tracepipe = &tp
	offer(&sinks.Item{Stats: &st, StatsUID: sn.uid, StatsTime: bootNanos(), Flush: true, Final: true})
	cctx, cancel := context.WithTimeout(ctx, sinkCloseTime)
	defer cancel()
	var werr error
	for _, l := range lanes { // each sink bounds its own close (relay, nats: CloseTimeout)
		if err := l.Close(cctx); err != nil {
			werr = errors.Join(werr, err)
		}
		if err := l.Err(); err != nil {
			werr = errors.Join(werr, fmt.Errorf("%s: %w", l.Name(), err))
		}
		if st := l.Stats(); st.PacketsDroppedError+st.PacketsDroppedQueue > 0 {
			werr = errors.Join(werr, fmt.Errorf("%s: %d packets not delivered", l.Name(), st.PacketsDroppedError+st.PacketsDroppedQueue))
		}
	}
	if werr != nil {
		sn.result.Err = errors.Join(sn.result.Err, werr)
	}
}

func compressionOfName(path string) string {
	switch {
	case strings.HasSuffix(path, ".gz"):
		return sinks.CompressionGzip
	case strings.HasSuffix(path, ".zst"):
		return sinks.CompressionZstd
	}
	return sinks.CompressionNone
}

// TracePacket fields of triggers (Perfetto's trace_packet.proto).
const (
	fieldTrigger              = 46
	fieldCloneSnapshotTrigger = 113
)

// snapReader reads a finished clone back into packets, on the snapshot's
// goroutine: it owns the clones, the restore copies and the sequence ids.
type snapReader struct {
	sn       *snapshot
	clones   []*buffer.TraceBuffer
	b        batch
	pkt      buffer.Packet
	restores uint64
	invalid  uint64
}

func (r *snapReader) read(emit func(*sinks.Item)) {
	flush := func() {
		b := &r.b
		b.Packets = b.Packets[:0]
		start := 0
		for _, e := range b.ends {
			b.Packets = append(b.Packets, b.data[start:e])
			start = e
		}
		if len(b.Packets) > 0 {
			emit(&b.Item)
		}
		b.reset()
	}
	for _, p := range r.sn.preamble {
		r.b.appendPacket(p)
	}
	for i, c := range r.clones {
		rs := r.sn.restores[i]
		c.BeginRead()
		for c.ReadNextTracePacket(&r.pkt) {
			start, ok := r.b.appendValid(&r.pkt)
			if !ok {
				r.invalid++
				continue
			}
			r.b.stamp(rs, &r.pkt, start, r.seqID(r.pkt.Seq.ProducerID, r.pkt.Seq.WriterID))
			if r.b.full() {
				flush()
			}
		}
		if rs != nil {
			r.restores += rs.Stats().Restores
		}
	}
	flush()
}

func (r *snapReader) seqID(producer, writer uint16) uint32 {
	key := uint32(producer)<<16 | uint32(writer)
	id, ok := r.sn.seqIDs[key]
	if !ok {
		id = r.sn.nextSeq
		r.sn.nextSeq++
		r.sn.seqIDs[key] = id
	}
	return id
}

// SnapshotStats counts a session's snapshots.
type SnapshotStats struct {
	Taken   uint64 // written to every destination
	Failed  uint64 // failed (allocation, write error, session ended); the session went on
	Refused uint64 // refused: DefaultSnapshotsInFlight already running, or the session ending
	// MaxPause is the service goroutine's longest time on snapshot work
	// in one turn (capture or copy step): how long commits waited.
	MaxPause time.Duration
}

// SnapshotStats returns the counters so far .
func (s *Service) SnapshotStats() SnapshotStats {
	return SnapshotStats{Taken: s.snap.taken.Load(), Failed: s.snap.failed.Load(), Refused: s.snap.refused.Load(),
		MaxPause: time.Duration(s.snap.maxPauseNs.Load())}
}

// replaceBuffer gives bs an empty buffer of the same size and policy and
// returns the old one, which the caller must Close once done with it
// (transfer_on_clone, clear_before_clone). Mapping the new buffer's
// memory can fail when the OS is out of memory; bs then keeps its
// buffer. The
// buffer's sequence-restore fold goes on: the moved packets are not in
// it, so a sequence's state in the live trace comes back at its next
// incremental-state clear.
func (s *Service) replaceBuffer(bs *bufferState) (*buffer.TraceBuffer, error) {
	old := bs.buf
	nb, err := buffer.New(old.Size(), old.Policy())
	if err != nil {
		return nil, fmt.Errorf("replacing buffer %d: %w", bs.index, err)
	}
	old.SetOverwriteObserver(nil)
	bs.buf, bs.unread = nb, 0
	bs.observeOverwrites()
	return old, nil
}

// maxTriggerHistory bounds the acted triggers a snapshot repeats; the
// oldest go first (max_per_24h bounds most configs far below it).
const maxTriggerHistory = 1024

// remember keeps a for the snapshots to come.
func (t *triggerState) remember(a triggerAct) {
	if len(t.history) == maxTriggerHistory {
		t.history = append(t.history[:0], t.history[1:]...)
	}
	t.history = append(t.history, a)
}
