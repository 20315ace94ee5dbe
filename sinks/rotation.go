package sinks

import (
	"github.com/tracepipe/tracepipe/internal/wire"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Bounds of the state a rotating file sink keeps so that every file it
// starts is self-contained.
const (
	// MaxRestoreBytes bounds everything the fold holds (service packets,
	// per-sequence state, track descriptors).
	MaxRestoreBytes = 16 << 20
	// MaxSequenceStateBytes bounds one sequence's folded state. A sequence
	// whose interned data outgrow it (a writer that never clears its
	// incremental state) gets no restore packet until its next CLEARED,
	// and the overflow is counted (SinkStats.RestoreOverflows).
	MaxSequenceStateBytes = 1 << 20
)

// restoreState is the stream-side fold a rotating file sink keeps of what
// it wrote, so that each new file starts with what a reader needs (see
// appendPreamble): the service's clock snapshot, trace_config,
// system_info and trace_uuid; every track descriptor (global); and each
// sequence's incremental state since its last CLEARED: interned_data
// (merged: concatenated InternedData messages are one message) and the
// last trace_packet_defaults.
type restoreState struct {
	bytes        int                 // held in total
	service      map[int32][]byte    // payload field → latest service packet
	svcOrder     []int32             // first-seen order
	uid          int32               // the service's uid
	seqs         map[uint32]*seqFold // by trusted_packet_sequence_id
	seqOrder     []uint32
	tracks       map[uint64][]byte // track uuid → descriptor packet (loss fields stripped)
	trackOrd     []uint64
	stats        *tracefile.TraceStats // the last TraceStats written
	statsChanged bool
	overflows    uint64
	state        []byte // scratch for a sequence's state
}

// seqFold is one sequence's incremental state since its last CLEARED.
type seqFold struct {
	trusted  tracefile.Trusted
	interned []byte // InternedData message bodies, concatenated
	defaults []byte // the last trace_packet_defaults body
	overflow bool   // interned data outgrew MaxSequenceStateBytes since the last CLEARED
	seen     bool   // a CLEARED was seen: the state is complete
}

func newRestoreState() *restoreState {
	return &restoreState{service: map[int32][]byte{}, seqs: map[uint32]*seqFold{}, tracks: map[uint64][]byte{}}
}

// Service payloads a new file repeats.
var preambleService = []int32{tracefile.FieldClockSnapshot, tracefile.FieldTraceConfig, tracefile.FieldTraceUUID, tracefile.FieldSystemInfo}

// observe folds one packet written to the current file. p is untrusted
// in its payload; a packet that does not walk is ignored.
func (r *restoreState) observe(p []byte) {
	var (
		seq, flags, pid, machine uint64
		uid                      int64
		hasPID, cleared          bool
		payload                  int32
		payloadBytes             []byte
		defaults                 []byte
		hasDefaults              bool
		nInterned                int
		track                    []byte
	)
	var interned [4][]byte
	it := wire.Fields(p)
	for it.Next() {
		f := it.Field()
		num, body := f.Num, f.Bytes
		var v uint64
		if f.Type == protowire.VarintType {
			v = f.Varint
		}
		switch num {
		case tracefile.FieldTrustedSequenceID:
			seq = v
		case tracefile.FieldTrustedUID:
			uid = int64(int32(v))
		case tracefile.FieldTrustedPID:
			pid, hasPID = v, true
		case tracefile.FieldMachineID:
			machine = v
		case tracefile.FieldSequenceFlags:
			flags = v
		case tracefile.FieldIncrementalStateClear:
			cleared = cleared || v != 0
		case tracefile.FieldInternedData:
			if nInterned < len(interned) {
				interned[nInterned] = body
				nInterned++
			}
		case tracefile.FieldTracePacketDefaults:
			defaults, hasDefaults = body, true
		case tracefile.FieldTimestamp, tracefile.FieldTimestampClockID, tracefile.FieldPreviousPacketDropped,
			tracefile.FieldFirstPacketOnSequence:
		default:
			payload, payloadBytes = int32(num), body
			if num == tracefile.FieldTrackDescriptor {
				track = body
			}
		}
	}
	if it.Malformed() != nil {
		return
	}
	if seq == ServiceSequenceID {
		r.uid = int32(uid)
		switch payload {
		case tracefile.FieldClockSnapshot, tracefile.FieldTraceConfig, tracefile.FieldTraceUUID, tracefile.FieldSystemInfo:
			old, had := r.service[payload]
			if payload == tracefile.FieldTraceConfig && had {
				return // the session's config does not change
			}
			if !had {
				r.svcOrder = append(r.svcOrder, payload)
			}
			if r.bytes-len(old)+len(p) > MaxRestoreBytes {
				r.overflows++
				return
			}
			r.bytes += len(p) - len(old)
			r.service[payload] = append(old[:0], p...)
		case tracefile.FieldTraceStats:
			if ts, err := tracefile.DecodeTraceStats(payloadBytes); err == nil {
				r.stats, r.statsChanged = &ts, true
			}
		}
		return
	}
	if seq == 0 {
		return
	}
	if track != nil {
		r.observeTrack(p, track)
	}
	f := r.seqs[uint32(seq)]
	if f == nil {
		f = &seqFold{}
		r.seqs[uint32(seq)] = f
		r.seqOrder = append(r.seqOrder, uint32(seq))
	}
	f.trusted = tracefile.Trusted{UID: int32(uid), SequenceID: uint32(seq), PID: int32(pid), HasPID: hasPID, MachineID: uint32(machine)}
	if flags&tracefile.SeqIncrementalStateCleared != 0 || cleared {
		r.bytes -= len(f.interned) + len(f.defaults)
		f.interned, f.defaults, f.overflow, f.seen = f.interned[:0], f.defaults[:0], false, true
	}
	if hasDefaults {
		r.bytes += len(defaults) - len(f.defaults)
		f.defaults = append(f.defaults[:0], defaults...)
	}
	for _, in := range interned[:nInterned] {
		if f.overflow {
			break
		}
		if len(f.interned)+len(in) > MaxSequenceStateBytes || r.bytes+len(in) > MaxRestoreBytes {
			r.bytes -= len(f.interned)
			f.interned, f.overflow = nil, true
			r.overflows++
			break
		}
		r.bytes += len(in)
		f.interned = append(f.interned, in...)
	}
}

// observeTrack keeps the latest descriptor of each track uuid, without
// the packet's loss fields and sequence flags (see below).
func (r *restoreState) observeTrack(p, desc []byte) {
	var uuid uint64
	it := wire.Fields(desc)
	for it.Next() {
		if f := it.Field(); f.Num == 1 && f.Type == protowire.VarintType {
			uuid = f.Varint
		}
	}
	if it.Malformed() != nil {
		return
	}
	old, had := r.tracks[uuid]
	if r.bytes-len(old)+len(p) > MaxRestoreBytes {
		r.overflows++
		return
	}
	if !had {
		r.trackOrd = append(r.trackOrd, uuid)
	}
	cp := old[:0]
	for it := wire.Fields(p); it.Next(); {
		f := it.Field()
		switch f.Num {
		case tracefile.FieldPreviousPacketDropped, tracefile.FieldFirstPacketOnSequence,
			tracefile.FieldSequenceFlags, tracefile.FieldIncrementalStateClear:
			// A copy must neither invalidate its sequence (loss), nor clear
			// the state its restore packet just set (CLEARED), nor depend on
			// it (NEEDS): a descriptor needs no incremental state.
		default:
			cp = append(cp, f.Raw(p)...)
		}
	}
	r.bytes += len(cp) - len(old)
	r.tracks[uuid] = cp
}

// appendPreamble calls emit with each packet a new file starts with, in
// the order a reader needs them: the service packets (clock snapshot
// first), a sync marker, one restore packet per sequence (CLEARED + its
// folded state: trace_processor accepts the sequence's next packets),
// then the track descriptors. emit must not keep the slice.
func (r *restoreState) appendPreamble(scratch []byte, emit func([]byte)) []byte {
	for _, f := range preambleService {
		if p, ok := r.service[f]; ok {
			emit(p)
		}
	}
	scratch = tracefile.AppendSyncMarkerPacket(scratch[:0], r.uid)
	emit(scratch)
	for _, id := range r.seqOrder {
		f := r.seqs[id]
		if f.overflow {
			continue
		}
		st := r.state[:0]
		if len(f.interned) > 0 {
			st = wire.AppendBytes(st, tracefile.FieldInternedData, f.interned)
		}
		if len(f.defaults) > 0 {
			st = wire.AppendBytes(st, tracefile.FieldTracePacketDefaults, f.defaults)
		}
		r.state = st
		scratch = tracefile.AppendRestorePacket(scratch[:0], st, f.trusted)
		emit(scratch)
	}
	for _, u := range r.trackOrd {
		emit(r.tracks[u])
	}
	return scratch
}

// trailer builds the TraceStats a rotated file ends with: the last one
// written, with the sink's counters (written includes this packet).
func (r *restoreState) trailer(dst []byte, st SinkStats) []byte {
	var ts tracefile.TraceStats
	if r.stats != nil {
		ts = *r.stats
	}
	tp := tracefile.TracepipeStats{}
	if ts.Tracepipe != nil {
		tp = *ts.Tracepipe
	}
	setSinkCounters(&tp, st)
	ts.Tracepipe = &tp
	return tracefile.AppendTraceStatsPacket(dst, &ts, r.uid, bootNanos())
}

// setSinkCounters writes a sink's counters into tp, counting the stats
// packet being written as written.
func setSinkCounters(tp *tracefile.TracepipeStats, st SinkStats) {
	st.PacketsWritten++
	SetTraceStats(tp, st)
}

// SetTraceStats writes st into tp's sink counters (sink_packets_written,
// sink_bytes_written, sink_packets_filtered, sink_packets_dropped: queue
// and errors, sink_errors, sink_filter_errors, sink_restore_overflows,
// sink_reconnects).
func SetTraceStats(tp *tracefile.TracepipeStats, st SinkStats) {
	tp.SinkPacketsWritten = st.PacketsWritten
	tp.SinkBytesWritten = st.BytesWritten
	tp.SinkPacketsFiltered = st.PacketsFiltered
	tp.SinkPacketsDropped = st.PacketsDroppedQueue + st.PacketsDroppedError
	tp.SinkErrors = st.Errors
	tp.SinkFilterErrors = st.FilterErrors
	tp.SinkRestoreOverflows = st.RestoreOverflows
	tp.SinkReconnects = st.Reconnects
}

// bootNanos is CLOCK_BOOTTIME, the trace clock of service packets.
func bootNanos() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano())
}
