// Package trackevent writes Perfetto TrackEvent packets — slices, instants
// and counters on named tracks, with interned event names — straight into
// a data source's chunk memory through the writer's message API
// (plugins.PacketWriter.NewTracePacket), so a data source author, in this
// process or in a plugin, never hand-encodes protos. Field numbers are
// Perfetto's (reference trace-format.md §6).
//
// A Writer belongs to one goroutine, like the PacketWriter it wraps; only
// ClearIncrementalState may be called from another (the data source's).
// It must not know about transports or the service.
package trackevent

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/plugins"
)

// Perfetto field numbers (trace-format.md §2, §6).
const (
	pktTimestamp       = 8
	pktTrackEvent      = 11
	pktInternedData    = 12
	pktSequenceFlags   = 13
	pktTrackDescriptor = 60

	seqIncrementalStateCleared = 1
	seqNeedsIncrementalState   = 2

	tdUUID    = 1
	tdName    = 2
	tdCounter = 8

	teType         = 9
	teNameIID      = 10
	teTrackUUID    = 11
	teCounterValue = 30

	typeSliceBegin = 1
	typeSliceEnd   = 2
	typeInstant    = 3
	typeCounter    = 4

	internedEventNames = 2
	eventNameIID       = 1
	eventNameName      = 2
)

// Now is CLOCK_BOOTTIME in nanoseconds: the clock Perfetto and tracepipe
// use for packet timestamps (time.Now is wall time, far from the trace).
func Now() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// track is a descriptor to write again after incremental state is cleared.
type track struct {
	uuid    uint64
	name    string
	counter bool
}

// Writer writes TrackEvent packets into one sequence.
type Writer struct {
	w       plugins.PacketWriter
	names   map[string]uint64 // interned event names of this sequence
	nextIID uint64
	tracks  []track
	// cleared: the next event must say SEQ_INCREMENTAL_STATE_CLEARED
	// (the first event of the sequence, and the first after a clear).
	cleared bool
	clear   atomic.Bool // ClearIncrementalState was called
}

// New wraps w (one sequence, used by one goroutine).
func New(w plugins.PacketWriter) *Writer {
	return &Writer{w: w, names: map[string]uint64{}, nextIID: 1, cleared: true}
}

// ClearIncrementalState makes the next event start the sequence's
// incremental state again (interned names, descriptors written again).
// Call it from the data source's ClearIncrementalState; safe from any
// goroutine.
func (t *Writer) ClearIncrementalState() { t.clear.Store(true) }

// Track declares a track for slices and instants. Declare each track once;
// the Writer writes its descriptor again after incremental state is
// cleared.
func (t *Writer) Track(uuid uint64, name string) error {
	t.tracks = append(t.tracks, track{uuid: uuid, name: name})
	return t.descriptor(t.tracks[len(t.tracks)-1])
}

// CounterTrack declares a counter track.
func (t *Writer) CounterTrack(uuid uint64, name string) error {
	t.tracks = append(t.tracks, track{uuid: uuid, name: name, counter: true})
	return t.descriptor(t.tracks[len(t.tracks)-1])
}

func (t *Writer) descriptor(tr track) error {
	p := t.w.NewTracePacket()
	d := p.BeginNested(pktTrackDescriptor)
	d.AppendVarint(tdUUID, tr.uuid)
	d.AppendString(tdName, tr.name)
	if tr.counter {
		d.BeginNested(tdCounter).End()
	}
	return p.Finish()
}

// begin starts an event packet: timestamp, sequence flags, and the
// interned name (a new one is added to this packet's interned_data).
func (t *Writer) event(ts, trackUUID uint64, typ uint64, name string, counter int64) error {
	if t.clear.Swap(false) {
		clear(t.names)
		t.nextIID = 1
		t.cleared = true
		for _, tr := range t.tracks {
			if err := t.descriptor(tr); err != nil {
				return err
			}
		}
	}
	var iid uint64
	var fresh bool
	if name != "" {
		iid, fresh = t.names[name], false
		if iid == 0 {
			iid, fresh = t.nextIID, true
			t.nextIID++
			t.names[name] = iid
		}
	}
	flags := uint64(seqNeedsIncrementalState)
	if t.cleared {
		flags |= seqIncrementalStateCleared
		t.cleared = false
	}
	p := t.w.NewTracePacket()
	p.AppendVarint(pktTimestamp, ts)
	p.AppendVarint(pktSequenceFlags, flags)
	if fresh {
		in := p.BeginNested(pktInternedData)
		en := in.BeginNested(internedEventNames)
		en.AppendVarint(eventNameIID, iid)
		en.AppendString(eventNameName, name)
	}
	e := p.BeginNested(pktTrackEvent)
	e.AppendVarint(teType, typ)
	e.AppendVarint(teTrackUUID, trackUUID)
	if iid != 0 {
		e.AppendVarint(teNameIID, iid)
	}
	if typ == typeCounter {
		e.AppendVarint(teCounterValue, uint64(counter))
	}
	return p.Finish()
}

// Begin opens a slice named name on track at ts (CLOCK_BOOTTIME ns).
func (t *Writer) Begin(ts, trackUUID uint64, name string) error {
	return t.event(ts, trackUUID, typeSliceBegin, name, 0)
}

// End closes the innermost open slice on track.
func (t *Writer) End(ts, trackUUID uint64) error {
	return t.event(ts, trackUUID, typeSliceEnd, "", 0)
}

// Instant writes a zero-duration event.
func (t *Writer) Instant(ts, trackUUID uint64, name string) error {
	return t.event(ts, trackUUID, typeInstant, name, 0)
}

// Counter sets a counter track's value at ts.
func (t *Writer) Counter(ts, trackUUID uint64, value int64) error {
	return t.event(ts, trackUUID, typeCounter, "", value)
}
