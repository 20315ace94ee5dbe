package tpimport

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/tracefile"
)

// syncRound is a remote_clock_sync holding one round: client snapshots
// {BOOTTIME c1}, {BOOTTIME c2} and host snapshots {BOOTTIME h1}, {h2}.
func syncRound(c1, h1, c2, h2 uint64) Field {
	half := func(c, h uint64) Field {
		return Sub(1, Sub(2, Sub(1, Varint(1, 6), Varint(2, c))), Sub(3, Sub(1, Varint(1, 6), Varint(2, h))))
	}
	return Sub(tracefile.FieldRemoteClockSync, half(c1, h1), half(c2, h2))
}

// machinePackets are what a tracepipe sender's stream looks like once
// merged: the machine's own clock snapshot first, a track descriptor, then
// three events on BOOTTIME around base (no timestamp_clock_id: the
// machine's default clock).
func machinePackets(m, seq uint32, base uint64) [][]byte {
	return [][]byte{
		Packet(MachineID(m), Seq(seq), Snapshot(6, C(6, base), C(3, base-100*ms))),
		Packet(MachineID(m), Seq(seq), Descriptor(uint64(seq)*100, "t", false)),
		Packet(MachineID(m), Seq(seq), Ts(base+1*ms), Event(SliceBegin, uint64(seq)*100, 0)),
		Packet(MachineID(m), Seq(seq), Ts(base+2*ms), Event(SliceEnd, uint64(seq)*100, 0)),
		Packet(MachineID(m), Seq(seq), Ts(base+3*ms), Event(Instant, uint64(seq)*100, 0)),
	}
}

func hostSnapshot() []byte { return Packet(Seq(1), Snapshot(6, C(6, 5000*ms), C(3, 4900*ms))) }

// marker is what serve writes after a machine's first remote_clock_sync:
// a timestamped packet of the machine, so that its tracker converts a
// timestamp before the machine's own clock snapshot arrives.
func marker(m uint32, ts uint64) []byte { return Packet(UID(0), MachineID(m), Ts(ts), ClockID(6)) }

func cat(parts ...[][]byte) [][]byte {
	var out [][]byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestMergedWithoutClockSync is the merged trace serve wrote before clock
// sync, from two concurrent senders: no host packet, so machine 1 is
// adopted as the host; machine 2's own clock snapshot then makes machine
// 2's BOOTTIME the trace clock, and machine 1's later events have no path
// to it: they are dropped (the clock_sync_failure_no_path).
func TestMergedWithoutClockSync(t *testing.T) {
	m1, m2 := machinePackets(1, 2, 1000*ms), machinePackets(2, 3, 7000*ms)
	r := check(t, cat(m1[:3], m2, m1[3:])...) // m1's last two events after m2's snapshot
	wantStat(t, r, "clock_sync_failure_no_path", -1, 2)
	wantStat(t, r, "clock_sync_failure_undeferrable_packet_loss", -1, 2)
	if !hasCode(r, CodeTraceClockMoved) {
		t.Errorf("codes %q lack %s", r.Codes(), CodeTraceClockMoved)
	}
	for _, s := range r.Sequences {
		want := int64(0)
		if s.Machine == 1 {
			want = 2
		}
		if s.Dropped != want {
			t.Errorf("machine %d: %d packets dropped, want %d", s.Machine, s.Dropped, want)
		}
	}
	// One sender after the other: nothing is dropped, but the trace clock
	// still moves to machine 2, which check reports.
	r = check(t, cat(m1, m2)...)
	wantCodes(t, r, CodeTraceClockMoved)
}

// TestMergedHostWithoutClockSync: the receiver's host packets first but
// neither remote_clock_sync nor markers: each machine's snapshot takes the
// trace clock in turn, and machine 1's events after machine 2's snapshot
// are lost.
func TestMergedHostWithoutClockSync(t *testing.T) {
	m1, m2 := machinePackets(1, 2, 1000*ms), machinePackets(2, 3, 7000*ms)
	r := check(t, cat([][]byte{hostSnapshot()}, m1[:3], m2, m1[3:])...)
	wantStat(t, r, "clock_sync_failure_no_path", -1, 2)
	wantStat(t, r, "clock_sync_failure_undeferrable_packet_loss", -1, 2)
}

// TestMergedMarkersWithoutClockSync is what serve writes for senders that
// send no clock sync: a marker before each machine's stream keeps the
// trace clock on the host, and trace_processor bridges each machine by
// assuming its BOOTTIME is the host's: nothing is dropped, and check says
// so.
func TestMergedMarkersWithoutClockSync(t *testing.T) {
	m1, m2 := machinePackets(1, 2, 1000*ms), machinePackets(2, 3, 7000*ms)
	r := check(t, cat([][]byte{hostSnapshot(), marker(1, 5000*ms)}, m1[:3], [][]byte{marker(2, 5001*ms)}, m2, m1[3:])...)
	wantCodes(t, r, CodeClockAssumedAligned)
	for _, f := range r.Findings {
		if f.Count != 1 || (f.Machine != 1 && f.Machine != 2) {
			t.Errorf("finding %+v", f)
		}
	}
}

// TestMergedWithClockSync: the layout serve writes (host snapshot first;
// per machine a remote_clock_sync and a marker before its stream) is clean
// with the machines' streams interleaved.
func TestMergedWithClockSync(t *testing.T) {
	m1, m2 := machinePackets(1, 2, 1000*ms), machinePackets(2, 3, 7000*ms)
	sync1 := [][]byte{Packet(MachineID(1), UID(0), syncRound(1000*ms, 5000*ms, 1000*ms+200, 5000*ms+200)), marker(1, 1000*ms+200)}
	sync2 := [][]byte{Packet(MachineID(2), UID(0), syncRound(7000*ms, 5001*ms, 7000*ms+200, 5001*ms+200)), marker(2, 7000*ms+200)}
	r := check(t, cat([][]byte{hostSnapshot()}, sync1, m1[:3], sync2, m2, m1[3:])...)
	wantCodes(t, r)
	for _, s := range r.Sequences {
		if s.Machine != 0 && s.ID != 0 && s.Imported != 4 { // ID 0: remote_clock_sync and marker
			t.Errorf("machine %d sequence %d: %d imported, want 4", s.Machine, s.ID, s.Imported)
		}
	}
	// Without the markers each machine's snapshot still takes the trace
	// clock (its tracker converted nothing yet): the round does not help.
	r = check(t, cat([][]byte{hostSnapshot(), sync1[0]}, m1[:3], [][]byte{sync2[0]}, m2, m1[3:])...)
	if !hasCode(r, CodeTraceClockMoved) {
		t.Errorf("codes %q lack %s", r.Codes(), CodeTraceClockMoved)
	}
}

// TestMergedClockSyncWithoutRound: a remote_clock_sync with only one half
// of a round yields no offset; the marker's conversion then bridges the
// machine by assumption.
func TestMergedClockSyncWithoutRound(t *testing.T) {
	one := Sub(tracefile.FieldRemoteClockSync, Sub(1, Sub(2, Sub(1, Varint(1, 6), Varint(2, 1000*ms))), Sub(3, Sub(1, Varint(1, 6), Varint(2, 5000*ms)))))
	r := check(t, cat([][]byte{hostSnapshot(), Packet(MachineID(1), one), marker(1, 1000*ms)}, machinePackets(1, 2, 1000*ms))...)
	wantCodes(t, r, CodeClockAssumedAligned, CodeRemoteSyncNoRound)
}

func hasCode(r *Report, code string) bool {
	for _, c := range r.Codes() {
		if c == code {
			return true
		}
	}
	return false
}

// TestRemoteClockOffsets follows CalculateClockOffsets on exact numbers:
// each round gives (c1+c2)/2 − h1 and c2 − (h1+h2)/2, all averaged, and
// adjacent snapshots 30 s or more apart (client BOOTTIME) are not paired.
func TestRemoteClockOffsets(t *testing.T) {
	// Round 1: c1=1000, h1=510, c2=1100, h2=620 → 1050−510=540, 1100−565=535.
	// Round 2 (40 s later): c1=40e9+1000, h1=40e9+400, c2=40e9+1300, h2=40e9+900
	// → (40e9+1150)−(40e9+400)=750, (40e9+1300)−(40e9+650)=650.
	half := func(c, h uint64) Field {
		return Sub(1, Sub(2, Sub(1, Varint(1, 6), Varint(2, c))), Sub(3, Sub(1, Varint(1, 6), Varint(2, h))))
	}
	const s40 = 40_000_000_000
	payload := Message(half(1000, 510), half(1100, 620), half(s40+1000, s40+400), half(s40+1300, s40+900))
	got, err := RemoteClockOffsets(payload)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(540+535+750+650) / 4; len(got) != 1 || got[6] != want {
		t.Fatalf("offsets %v, want BOOTTIME %d", got, want)
	}
	// A clock missing on one side in one half is not estimated.
	payload = Message(half(1000, 510), Sub(1, Sub(2, Sub(1, Varint(1, 6), Varint(2, 1100)))))
	if got, _ := RemoteClockOffsets(payload); len(got) != 0 {
		t.Fatalf("offsets %v from half a round, want none", got)
	}
	if _, err := RemoteClockOffsets([]byte{0x0a, 0x05}); err == nil {
		t.Fatal("a truncated payload decoded")
	}
}

// goldenTwoMachines is Perfetto's own two-machine trace (traced +
// traced_relay), which trace_processor imports with no error stat.
func goldenTwoMachines(t *testing.T) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testsupport.GoldenDir(t, "perfetto-ipc", "l_relay_two_machines"), "trace.pftrace"))
	if err != nil {
		t.Fatal(err)
	}
	pkts, err := tracefile.ReadAll(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return pkts
}

func TestGoldenTwoMachinesClean(t *testing.T) {
	pkts := goldenTwoMachines(t)
	r := check(t, pkts...)
	for _, s := range r.Stats {
		if s.Value != 0 && (s.Severity == SeverityError || s.Severity == SeverityDataLoss) {
			t.Errorf("stat %s = %d (%s); trace_processor raises none (tp_import.txt)", s.Name, s.Value, s.Severity)
		}
	}
	remote := int64(0)
	for _, s := range r.Sequences {
		if s.Machine != 0 {
			remote += s.Imported
		}
	}
	// The remote machine's system_info and 7 sys_stats packets (42
	// counters on 6 tracks in tp_import.txt).
	if remote != 8 {
		t.Errorf("remote machine: %d packets imported, want its system_info and 7 sys_stats packets", remote)
	}
	var sync []byte
	for _, p := range pkts {
		if info, _ := tracefile.DecodePacket(p); info.PayloadField == tracefile.FieldRemoteClockSync {
			sync = info.Payload
		}
	}
	off, err := RemoteClockOffsets(sync)
	if err != nil {
		t.Fatal(err)
	}
	// One kernel plays both machines: BOOTTIME's offset is within half the
	// round trip (c2 − c1 = 268,117 ns) of zero; the exact value is
	// ((c1+c2)/2 − h1 + c2 − (h1+h2)/2) / 2 of the capture's readings.
	if off[6] != (-78156-3630)/2 {
		t.Errorf("BOOTTIME offset %d, want %d", off[6], (-78156-3630)/2)
	}
}

// TestGoldenTwoMachinesWithoutClockSync: the same trace without its
// remote_clock_sync: the remote machine's first conversion finds no path
// and trace_processor equates its BOOTTIME with the host's.
func TestGoldenTwoMachinesWithoutClockSync(t *testing.T) {
	var pkts [][]byte
	for _, p := range goldenTwoMachines(t) {
		if info, _ := tracefile.DecodePacket(p); info.PayloadField != tracefile.FieldRemoteClockSync {
			pkts = append(pkts, p)
		}
	}
	r := check(t, pkts...)
	wantCodes(t, r, CodeClockAssumedAligned)
}

// FuzzRemoteClockOffsets: any remote_clock_sync payload yields offsets or
// an error, never a panic; an offset is only given for a clock the payload
// names, and a whole trace carrying the payload on a forked machine checks
// without panicking.
func FuzzRemoteClockOffsets(f *testing.F) {
	half := func(c, h uint64) Field {
		return Sub(1, Sub(2, Sub(1, Varint(1, 6), Varint(2, c))), Sub(3, Sub(1, Varint(1, 6), Varint(2, h))))
	}
	f.Add(Message(half(1000, 510), half(1100, 620)))
	f.Add(Message(half(1, 1<<63), half(1<<64-1, 2)))
	f.Add([]byte{0x0a, 0x00, 0x0a, 0x02, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, p []byte) {
		off, err := RemoteClockOffsets(p)
		if err != nil {
			return
		}
		for id := range off {
			if !bytes.Contains(p, []byte{0x08, byte(id)}) && id < 128 {
				t.Fatalf("offset for clock %d, which the payload never names", id)
			}
		}
		trace := Trace(hostSnapshot(), Packet(MachineID(3), Bytes(tracefile.FieldRemoteClockSync, p)),
			Packet(MachineID(3), Seq(2), Ts(1000*ms), Event(Instant, 1, 0)))
		if _, err := Check(bytes.NewReader(trace), Options{}); err != nil {
			t.Fatal(err)
		}
	})
}

func mergedSeed() []byte {
	pkts := [][]byte{hostSnapshot(), Packet(MachineID(1), UID(0), syncRound(1000*ms, 5000*ms, 1000*ms+200, 5000*ms+200)), marker(1, 1000*ms)}
	pkts = append(pkts, machinePackets(1, 2, 1000*ms)...)
	return Trace(append(pkts, machinePackets(2, 3, 7000*ms)...)...)
}
