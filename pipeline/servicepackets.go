package pipeline

import (
	"crypto/rand"
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// serviceEvent is a lifecycle event waiting to be written.
type serviceEvent struct {
	kind int
	ts   uint64
}

// event records a lifecycle event; the next read pass writes it.
func (s *Service) event(kind int) {
	s.events = append(s.events, serviceEvent{kind: kind, ts: bootNanos()})
}

// bootNanos is CLOCK_BOOTTIME in nanoseconds, the default trace clock.
func bootNanos() uint64 { return clockNanos(unix.CLOCK_BOOTTIME) }

func clockNanos(id int32) uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(id, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// snapshotClocks reads the clocks in the order Perfetto's service does
// (trace-format.md §5).
func snapshotClocks() []tracefile.Clock {
	return []tracefile.Clock{
		{ID: tracefile.ClockBoottime, Timestamp: clockNanos(unix.CLOCK_BOOTTIME)},
		{ID: 2, Timestamp: clockNanos(unix.CLOCK_REALTIME_COARSE)},  // REALTIME_COARSE
		{ID: 4, Timestamp: clockNanos(unix.CLOCK_MONOTONIC_COARSE)}, // MONOTONIC_COARSE
		{ID: tracefile.ClockRealtime, Timestamp: clockNanos(unix.CLOCK_REALTIME)},
		{ID: 3, Timestamp: clockNanos(unix.CLOCK_MONOTONIC)},     // MONOTONIC
		{ID: 5, Timestamp: clockNanos(unix.CLOCK_MONOTONIC_RAW)}, // MONOTONIC_RAW
	}
}

// begin records the session start: uuid, initial clock snapshot and the
// tracing_started event.
func (s *Service) begin() {
	s.startClock = snapshotClocks()
	s.start = time.Now()
	s.lastStats = s.start
	s.event(tracefile.EventTracingStarted)
	s.publishStatus()
}

// newUUID draws the session's trace uuid (New: sinks are told it when
// they open).
func (s *Service) newUUID() {
	var u [16]byte
	_, _ = rand.Read(u[:])
	s.traceUUID = [2]int64{int64(binary.BigEndian.Uint64(u[:8])), int64(binary.BigEndian.Uint64(u[8:]))}
}

// uuidBytes is the trace uuid as 16 bytes (big endian, msb first).
func (s *Service) uuidBytes() [16]byte {
	var u [16]byte
	binary.BigEndian.PutUint64(u[:8], uint64(s.traceUUID[0]))
	binary.BigEndian.PutUint64(u[8:], uint64(s.traceUUID[1]))
	return u
}

// servicePacket starts a service packet (service header) in scratch.
func (s *Service) servicePacket() []byte {
	return tracefile.AppendServiceHeader(s.scratch[:0], s.uid)
}

// appendPreamble writes the service packets that precede buffer data: on
// the first pass the clock snapshot, sync marker, trace config, trace uuid, provenance,
// system info, lifecycle events and ProtoVM states; on later passes the
// pending lifecycle events, a sync marker when stats are due, and — in
// streaming mode — provenance and ProtoVM states again when an overwrite
// changed a state since they were last written.
func (s *Service) appendPreamble(b *batch) {
	if !s.firstPass {
		s.firstPass = true
		p := s.servicePacket()
		p = tracefile.AppendTimestamp(p, s.startClock[0].Timestamp)
		s.emit(b, tracefile.AppendClockSnapshot(p, s.startClock, tracefile.ClockBoottime))
		s.emit(b, tracefile.AppendSyncMarkerPacket(s.scratch[:0], s.uid))
		s.emit(b, appendTraceConfig(s.servicePacket(), s.cfg))
		s.emit(b, tracefile.AppendTraceUUID(s.servicePacket(), s.traceUUID[0], s.traceUUID[1]))
		s.appendProvenance(b)
		s.emit(b, appendSystemInfo(s.servicePacket()))
		s.appendEvents(b)
		s.appendProtoVMs(b)
		return
	}
	if time.Since(s.lastStats) >= s.cfg.StatsPeriod {
		s.emit(b, tracefile.AppendSyncMarkerPacket(s.scratch[:0], s.uid))
	}
	s.appendEvents(b)
	for _, bs := range s.buffers {
		if bs.vms != nil && bs.vms.Generation() != bs.vmGen {
			s.appendProvenance(b)
			s.appendProtoVMs(b)
			break
		}
	}
}

// appendProvenance writes trace_provenance: every (producer, writer) that
// wrote into each buffer, with its sequence id (assigned now if new), so
// a reader can map ProtoVM producer ids to sequences.
func (s *Service) appendProvenance(b *batch) {
	seqs := make([][]tracefile.ProvenanceSequence, len(s.buffers))
	for i, bs := range s.buffers {
		for _, ws := range bs.buf.WriterStats() {
			s.sequenceID(bs, ws.ProducerID, ws.WriterID)
		}
		seqs[i] = bs.provenance
	}
	s.emit(b, tracefile.AppendTraceProvenance(s.servicePacket(), seqs))
}

// appendProtoVMs writes one protovms packet per buffer with VMs.
func (s *Service) appendProtoVMs(b *batch) {
	for _, bs := range s.buffers {
		if bs.vms == nil || bs.vms.Len() == 0 {
			continue
		}
		bs.vmGen = bs.vms.Generation()
		s.emit(b, bs.vms.AppendProtoVMsField(s.servicePacket()))
	}
}

// appendEvents writes the pending lifecycle events, one packet each, in
// the order they happened.
func (s *Service) appendEvents(b *batch) {
	for _, e := range s.events {
		p := tracefile.AppendTimestamp(s.servicePacket(), e.ts)
		s.emit(b, tracefile.AppendServiceEvent(p, e.kind, 0))
	}
	s.events = s.events[:0]
	s.appendTriggers(b) // flightrec_triggers.go
}

// appendSystemInfo appends a system_info (45) field: utsname, service
// version, page size and CPU count (tracefile owns the encoding).
func appendSystemInfo(dst []byte) []byte {
	return tracefile.AppendSystemInfo(dst, tracefile.LocalSystemInfo())
}

// traceStats assembles the TraceStats packet content: every buffer's
// BufferStats, the writers' chunk histograms, the service counters and
// tracepipe's own (producer, SMB, sink and ProtoVM) counters.
func (s *Service) traceStats() tracefile.TraceStats {
	c := &s.counters
	// Each in-process or plugin data source counts as a producer of its
	// own; Perfetto producers count as traced counts them (RemoteProducers.Counts).
	own := uint64(0)
	for _, p := range s.producers {
		if p.remote == nil {
			own++
		}
	}
	var connected, seen, registered, instances uint64
	if s.remote != nil {
		connected, seen, registered, instances = s.opts.Perfetto.Counts()
	}
	ts := tracefile.TraceStats{
		ChunkPayloadHistogramDef: tracefile.ChunkPayloadHistogramBounds,
		ProducersConnected:       own + connected,
		ProducersSeen:            own + seen,
		DataSourcesRegistered:    own + registered,
		DataSourcesSeen:          own + instances,
		TracingSessions:          1,
		TotalBuffers:             uint64(len(s.buffers)),
		ChunksDiscarded:          c.chunksDiscarded,
		PatchesDiscarded:         c.patchesDiscarded,
		InvalidPackets:           c.invalidPackets,
		FlushesRequested:         c.flushesRequested,
		FlushesSucceeded:         c.flushesSucceeded,
		FlushesFailed:            c.flushesFailed,
		FinalFlushOutcome:        c.finalFlush,
	}
	for _, bs := range s.buffers {
		st := bs.buf.Stats()
		ts.BufferStats = append(ts.BufferStats, tracefile.BufferStats{
			BufferSize: st.BufferSize, BytesWritten: st.BytesWritten, BytesOverwritten: st.BytesOverwritten,
			BytesRead: st.BytesRead, PaddingBytesWritten: st.PaddingBytesWritten, PaddingBytesCleared: st.PaddingBytesCleared,
			ChunksWritten: st.ChunksWritten, ChunksRewritten: st.ChunksRewritten, ChunksRelocated: st.ChunksRelocated,
			ChunksOverwritten: st.ChunksOverwritten, ChunksDiscarded: st.ChunksDiscarded, ChunksRead: st.ChunksRead,
			ChunksCommittedOutOfOrder: st.ChunksCommittedOutOfOrder, WriteWrapCount: st.WriteWrapCount,
			PatchesSucceeded: st.PatchesSucceeded, PatchesFailed: st.PatchesFailed,
			ReadaheadsSucceeded: st.ReadaheadsSucceeded, ReadaheadsFailed: st.ReadaheadsFailed,
			AbiViolations: st.AbiViolations, TraceWriterPacketLoss: st.TraceWriterPacketLoss,
		})
		for _, ws := range bs.buf.WriterStats() {
			w := tracefile.WriterStats{SequenceID: uint64(s.sequenceID(bs, ws.ProducerID, ws.WriterID)), Buffer: uint32(bs.index)}
			w.HistogramCounts = append(w.HistogramCounts, ws.Counts[:]...)
			w.HistogramSum = append(w.HistogramSum, ws.Sums[:]...)
			ts.WriterStats = append(ts.WriterStats, w)
		}
	}
	tp := &tracefile.TracepipeStats{CommitsMalformed: c.commitsMalformed, ReadbackDeferred: c.readbackDeferred, Producers: s.producerStats()}
	for _, p := range s.producers {
		tp.ProducerPacketsDropped += p.side.PacketsDropped()
		tp.SMBChunksRejected += p.reader.Stats().TotalRejected()
		tp.CommitsAfterStop += p.commitsLate.Load()
		tp.DataSourceErrors += p.dataSourceErrs.Load()
	}
	// The sums of every sink, for Result and the status line; each sink's
	// own TraceStats packet carries that sink's counters instead (its
	// lane stamps them when writing it).
	withSinkTotals(tp, s.sinkTotals())
	for _, bs := range s.buffers {
		if bs.vms != nil {
			st := bs.vms.Stats()
			tp.ProtoVMPatchesOK += st.PatchesOk
			tp.ProtoVMPatchesFailed += st.PatchesAbort // Error is a program's normal "not mine"
			tp.ProtoVMPacketsUnrouted += st.PacketsUnrouted
		}
		if bs.restore != nil {
			r := bs.restore.Stats()
			tp.ProtoVMPatchesOK += r.FoldOK
			tp.ProtoVMPatchesFailed += r.FoldAborted + r.FoldNewFailed
			tp.ProtoVMPacketsUnrouted += r.Unrouted
			tp.SequenceRestores += r.Restores
		}
	}
	trig := s.TriggerStats()
	tp.TriggersRefused = trig.Unknown + trig.ProducerMismatch + trig.Skipped + trig.RateLimited + trig.Dropped
	tp.SnapshotsRefused = s.snap.refused.Load()
	tp.AlertRequestsRefused = s.alertRequestsRefused()
	ts.Tracepipe = tp
	return ts
}

// withSinkTotals sets tp's sink counters from st and returns tp.
func withSinkTotals(tp *tracefile.TracepipeStats, st sinks.SinkStats) *tracefile.TracepipeStats {
	if tp == nil {
		tp = &tracefile.TracepipeStats{}
	}
	sinks.SetTraceStats(tp, st)
	return tp
}
