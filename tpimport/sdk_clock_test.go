package tpimport

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The Perfetto SDKs' shape (golden captures b and g): each writer's
// sequence starts with a CLEARED packet holding trace_packet_defaults
// {timestamp_clock_id: 64} and a clock_snapshot of BOOTTIME and the
// sequence-scoped incremental clock 64 at the same instant, with an
// explicit timestamp 0; descriptors follow with timestamp 0 (a zero
// delta) or none at all; events carry deltas to the previous clock-64
// timestamp, some events absolute BOOTTIME timestamps (clock 6).

const s = 1_000 * ms

// sdkDefaults is trace_packet_defaults{timestamp_clock_id: clock}.
func sdkDefaults(clock uint32) Field { return Sub(59, Varint(58, uint64(clock))) }

// sdkSnapshot is the SDK's clock_snapshot: BOOTTIME and clock 64
// (incremental, with unit ns per tick) both at boot.
func sdkSnapshot(boot, unit uint64) Field {
	return Sub(tracefile.FieldClockSnapshot,
		Sub(1, Varint(1, 6), Varint(2, boot)),
		Sub(1, Varint(1, 64), Varint(2, boot/unit), Varint(3, 1), Varint(4, unit)))
}

// sdkTrace is a session from 1000 s to 1010 s of boot time whose SDK
// sequence 2 starts at 1001 s and writes events deltas apart (in ticks of
// unit ns) on clock 64, plus one absolute BOOTTIME event.
func sdkTrace(unit uint64, deltas ...uint64) [][]byte {
	pkts := [][]byte{
		Packet(Seq(1), Snapshot(6, C(6, 1000*s), C(3, 900*s))),
		Packet(Seq(2), Ts(0), Flags(Cleared), sdkDefaults(64), sdkSnapshot(1001*s, unit)),
		Packet(Seq(2), Descriptor(100, "t", false)),                      // no timestamp
		Packet(Seq(2), Ts(0), Flags(Needs), Descriptor(101, "p", false)), // a zero delta
	}
	for i, d := range deltas {
		pkts = append(pkts, Packet(Seq(2), Ts(d), Flags(Needs), Event(Instant, 100, 0, String(23, fmt.Sprint("e", i)))))
	}
	return append(pkts,
		Packet(Seq(2), Ts(1002*s), ClockID(6), Flags(Needs), Event(Instant, 101, 0, String(23, "abs"))),
		Packet(Seq(2), Ts(1), Flags(Needs), Event(Instant, 100, 0, String(23, "after"))),
		Packet(Seq(1), Snapshot(6, C(6, 1010*s), C(3, 910*s))))
}

// check on an SDK-shaped trace written by tracepipe's trace builder:
// timestamps 0 and deltas on clock 64 resolve from the sequence's
// snapshot, as trace_processor's ClockTracker does; no false
// timestamps_outside_session.
func TestSDKIncrementalClock(t *testing.T) {
	t.Run("deltas in ns", func(t *testing.T) {
		r := check(t, sdkTrace(1, 157_567, 36_570, 651, 2*s)...)
		wantCodes(t, r)
		if sq := r.Sequence(2); sq.Imported != sq.Packets-1 { // the snapshot is consumed
			t.Errorf("seq 2: %+v", sq)
		}
	})
	t.Run("deltas in µs ticks", func(t *testing.T) {
		r := check(t, sdkTrace(1000, 157_567, 36_570, 651, 2_000_000)...)
		wantCodes(t, r)
	})
	t.Run("deltas add up past the session", func(t *testing.T) {
		// Each delta alone is 30 s (as an absolute time it would lie near
		// boot, 970 s before the session); their sum, 1001 s + 4×30 s
		// (+1 ns for the last event), lies past its end: the finding names
		// the summed time.
		r := check(t, sdkTrace(1, 30*s, 30*s, 30*s, 30*s)...)
		wantCodes(t, r, CodeTimestampsOutside)
		if f := r.Findings[0]; f.Sequence != 2 || !strings.Contains(f.Message, fmt.Sprintf("%d..%d ns", 1001*s, 1121*s+1)) {
			t.Errorf("finding %+v, want the timestamps %d..%d", f, 1001*s, 1121*s+1)
		}
	})
	t.Run("clock 64 without a snapshot on its sequence", func(t *testing.T) {
		// Another sequence's snapshot does not define this one's clock 64.
		r := check(t,
			Packet(Seq(1), Snapshot(6, C(6, 1000*s), C(3, 900*s))),
			Packet(Seq(2), Ts(0), Flags(Cleared), sdkDefaults(64), sdkSnapshot(1001*s, 1)),
			Packet(Seq(3), Ts(0), Flags(Cleared), sdkDefaults(64), Descriptor(100, "t", false)),
			Packet(Seq(3), Ts(5), Flags(Needs), Event(Instant, 100, 0, String(23, "x"))))
		wantStat(t, r, "clock_sync_failure_unknown_source_clock", -1, 2)
	})
	t.Run("clock 64 re-registered as not incremental", func(t *testing.T) {
		r := check(t, append(sdkTrace(1, 5),
			Packet(Seq(2), Sub(tracefile.FieldClockSnapshot, Sub(1, Varint(1, 6), Varint(2, 1003*s)), Sub(1, Varint(1, 64), Varint(2, 1003*s)))))...)
		wantStat(t, r, "invalid_clock_snapshots", -1, 1)
	})
}

// The real SDKs' traces from the golden captures (C SDK b, C++ SDK with
// startup tracing g) are clean, as trace_processor imports them.
func TestSDKGoldenTracesClean(t *testing.T) {
	for _, capture := range []string{"b_track_event", "g_sdk_startup_tracing"} {
		t.Run(capture, func(t *testing.T) {
			r, err := CheckFile(filepath.Join(testsupport.GoldenDir(t, "perfetto-ipc", capture), "trace.pftrace"), Options{})
			if err != nil {
				t.Fatal(err)
			}
			wantCodes(t, r)
		})
	}
}
