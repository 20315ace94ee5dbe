package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

// boot is a one-clock snapshot: BOOTTIME ts.
func boot(ts uint64) []tracefile.Clock {
	return []tracefile.Clock{{ID: tracefile.ClockBoottime, Timestamp: ts}}
}

// roundAt is a round whose host half starts at h1 and whose round trip
// is rtt (both sides).
func roundAt(h1 uint64, rtt time.Duration) *ClockRound {
	return &ClockRound{Client1: boot(1000), Host1: boot(h1), Client2: boot(1000 + uint64(rtt)), Host2: boot(h1 + uint64(rtt)/2)}
}

func mergedStream(t *testing.T) (*Store, *Stream) {
	t.Helper()
	s, err := OpenStore(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	st, err := s.Stream(Identity{Machine: 9, Session: [16]byte{1}, Hostname: "a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Release)
	// The merged file exists from the first batch on (a stream that
	// never sends one leaves no file); rounds before it wait for it.
	d, n, b := batchOf(5)
	if ok, err := st.Append(1, d, n, b); !ok || err != nil {
		t.Fatal(ok, err)
	}
	return s, st
}

func packetsOf(t *testing.T, name string) []tracefile.PacketInfo {
	t.Helper()
	var out []tracefile.PacketInfo
	for _, p := range tracetest.ReadTrace(t, name) {
		out = append(out, p.Info)
	}
	return out
}

// A new merged file starts with the host's packets (no machine_id); a
// reopened one does not get them twice.
func TestMergedHostPreamble(t *testing.T) {
	dir := t.TempDir()
	for i := 0; i < 2; i++ {
		s, err := OpenStore(dir, true)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Stream(Identity{Machine: 9, Session: [16]byte{1}, Hostname: "a"})
		if err != nil {
			t.Fatal(err)
		}
		d, n, b := batchOf(5)
		if ok, err := st.Append(uint64(i+1), d, n, b); !ok || err != nil {
			t.Fatal(ok, err)
		}
		st.Release()
		s.Close()
	}
	pkts := packetsOf(t, dir+"/"+MergedName)
	var host []tracefile.PacketInfo
	for _, p := range pkts {
		if p.MachineID == 0 {
			host = append(host, p)
		}
	}
	if len(pkts) < 2 || pkts[0].Kind() != "clock_snapshot" || pkts[1].Kind() != "system_info" || len(host) != 2 {
		t.Fatalf("merged file starts with %+v and has %d host packets, want the host's clock_snapshot and system_info first, once", pkts[:min(2, len(pkts))], len(host))
	}
	for _, p := range host {
		if p.MachineID != 0 || p.SequenceID != 1 {
			t.Errorf("host packet %s: machine_id %d, sequence %d, want none and 1", p.Kind(), p.MachineID, p.SequenceID)
		}
	}
}

// Which rounds a merged file keeps: the first, then rounds spaced by
// ClockSyncSpacing whose round trip is within twice the best plus 1 ms,
// and a congested one only after five spacings without any.
func TestClockSyncSpacingAndCongestion(t *testing.T) {
	s, st := mergedStream(t)
	s.ClockSyncSpacing = time.Second
	const sec = uint64(time.Second)
	for _, tc := range []struct {
		name  string
		r     *ClockRound
		write bool
	}{
		{"first", roundAt(10*sec, 100*time.Microsecond), true},
		{"too soon", roundAt(10*sec+sec/2, 100*time.Microsecond), false},
		{"spaced", roundAt(11*sec, 150*time.Microsecond), true},
		{"congested", roundAt(12*sec, 50*time.Millisecond), false},
		{"better than best", roundAt(13*sec, 50*time.Microsecond), true},
		{"congested, 4 spacings on", roundAt(17*sec, 50*time.Millisecond), false},
		{"congested, 5 spacings on", roundAt(18*sec, 50*time.Millisecond), true},
		{"30 s round trip", roundAt(30*sec, 30*time.Second), false},
	} {
		got, err := st.ClockSync(tc.r)
		if err != nil || got != tc.write {
			t.Fatalf("%s: written %v, %v; want %v", tc.name, got, err, tc.write)
		}
	}
	if w, k := s.Stats.Clock.Rounds.Load(), s.Stats.Clock.Skipped.Load(); w != 4 || k != 4 {
		t.Errorf("stats: %d written, %d skipped; want 4 and 4", w, k)
	}
	var syncs int
	for _, p := range packetsOf(t, s.FileName(Identity{})) {
		if p.PayloadField == tracefile.FieldRemoteClockSync {
			syncs++
			if p.MachineID != 1 || p.SequenceID != 0 {
				t.Errorf("remote_clock_sync with machine_id %d, sequence %d; want 1 and none", p.MachineID, p.SequenceID)
			}
		}
	}
	if syncs != 4 {
		t.Errorf("%d remote_clock_sync packets, want 4", syncs)
	}
}

func TestClockRoundValidate(t *testing.T) {
	good := func() *ClockRound { return roundAt(5000, 100) }
	for _, tc := range []struct {
		name, want string
		edit       func(r *ClockRound)
	}{
		{"empty", "0 clocks", func(r *ClockRound) { r.Client1 = nil }},
		{"too many", "17 clocks", func(r *ClockRound) { r.Host2 = make([]tracefile.Clock, MaxSyncClocks+1) }},
		{"sequence clock", "not a builtin clock", func(r *ClockRound) { r.Client2 = append(r.Client2, tracefile.Clock{ID: 100}) }},
		{"twice", "listed twice", func(r *ClockRound) { r.Client1 = append(r.Client1, r.Client1[0]) }},
		{"no boottime", "no BOOTTIME", func(r *ClockRound) { r.Client1 = []tracefile.Clock{{ID: 3, Timestamp: 1}} }},
		{"overflow", "overflows int64", func(r *ClockRound) { r.Client2 = boot(1 << 63) }},
		{"client backwards", "client BOOTTIME runs backwards", func(r *ClockRound) { r.Client2 = boot(999) }},
		{"host backwards", "host BOOTTIME runs backwards", func(r *ClockRound) { r.Host2 = boot(4999) }},
	} {
		r := good()
		tc.edit(r)
		err := r.Validate()
		if !errors.Is(err, ErrBadClockRound) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := good().Validate(); err != nil {
		t.Fatal(err)
	}
	// An invalid round writes nothing; a per-session file ignores rounds.
	s, st := mergedStream(t)
	bad := good()
	bad.Client2 = boot(1)
	if ok, err := st.ClockSync(bad); ok || err == nil {
		t.Fatalf("invalid round: written %v, %v", ok, err)
	}
	if s.Stats.Clock.Rounds.Load()+s.Stats.Clock.Skipped.Load() != 0 {
		t.Fatal("an invalid round was counted")
	}
	ps, err := OpenStore(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	pst, err := ps.Stream(Identity{Machine: 9, Session: [16]byte{1}, Hostname: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer pst.Release()
	if ok, err := pst.ClockSync(good()); ok || err != nil {
		t.Fatalf("per-session file: written %v, %v", ok, err)
	}
	if _, err := os.Stat(ps.FileName(Identity{Machine: 9, Session: [16]byte{1}, Hostname: "a"})); !os.IsNotExist(err) {
		t.Fatalf("per-session file with no batch: %v; want none created", err)
	}
}

// FuzzClockSync: a round built from arbitrary bytes (four snapshots of up
// to 20 clocks each) is either refused by Validate or written, and the
// merged file still reads as a trace ending with that round (and the
// machine's marker).
func FuzzClockSync(f *testing.F) {
	enc := func(r *ClockRound) []byte {
		var b []byte
		for _, s := range [][]tracefile.Clock{r.Client1, r.Host1, r.Client2, r.Host2} {
			b = append(b, byte(len(s)))
			for _, c := range s {
				b = append(b, byte(c.ID))
				b = binary.BigEndian.AppendUint64(b, c.Timestamp)
			}
		}
		return b
	}
	f.Add(enc(roundAt(5000, 100)))
	f.Add(enc(&ClockRound{Client1: ReadClocks(nil), Host1: ReadClocks(nil), Client2: ReadClocks(nil), Host2: ReadClocks(nil)}))
	f.Add([]byte{1, 6, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		var snaps [4][]tracefile.Clock
		for i := range snaps {
			if len(data) == 0 {
				break
			}
			n := min(int(data[0]), 20)
			data = data[1:]
			for j := 0; j < n && len(data) >= 9; j++ {
				snaps[i] = append(snaps[i], tracefile.Clock{ID: uint32(data[0]), Timestamp: binary.BigEndian.Uint64(data[1:9])})
				data = data[9:]
			}
		}
		r := &ClockRound{Client1: snaps[0], Host1: snaps[1], Client2: snaps[2], Host2: snaps[3]}
		s, st := mergedStream(t)
		s.ClockSyncSpacing = 1
		ok, err := st.ClockSync(r)
		if (err == nil) != (r.Validate() == nil) {
			t.Fatalf("ClockSync error %v disagrees with Validate", err)
		}
		// A written round is the file's last packet but for the machine's
		// marker, which follows its first round.
		pkts := packetsOf(t, s.FileName(Identity{}))
		last := pkts[len(pkts)-1]
		if ok && last.PayloadField == 0 && last.MachineID == 1 && last.HasTimestamp {
			last = pkts[len(pkts)-2]
		}
		if ok && last.PayloadField != tracefile.FieldRemoteClockSync {
			t.Fatalf("written round is not the file's last packet: %+v", last)
		}
	})
}

// Every machine of a merged file gets one marker (a timestamped packet of
// the machine, no payload) before its first batch: right after its first
// round when it sends clock sync, else just before its first batch.
func TestMachineMarker(t *testing.T) {
	s, err := OpenStore(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	synced, err := s.Stream(Identity{Machine: 9, Session: [16]byte{1}, Hostname: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer synced.Release()
	plain, err := s.Stream(Identity{Machine: 8, Session: [16]byte{2}, Hostname: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Release()
	batch := record([]byte{0x40, 0x01, 0x50, 0x02}) // timestamp 1, sequence 2
	if ok, err := synced.ClockSync(roundAt(5000, 100)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for seq := uint64(1); seq <= 2; seq++ {
		for _, st := range []*Stream{synced, plain} {
			if ok, err := st.Append(seq, batch, 1, 4); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
	}
	var got []string
	for _, p := range packetsOf(t, s.FileName(Identity{}))[2:] { // after the host's two
		kind := p.Kind()
		switch {
		case p.SequenceID != 0:
			kind = "batch"
		case p.PayloadField == 0 && p.HasTimestamp:
			kind = "marker"
		}
		got = append(got, fmt.Sprintf("%s@%d", kind, p.MachineID))
	}
	want := []string{"remote_clock_sync@1", "marker@1", "batch@1", "marker@2", "batch@2", "batch@1", "batch@2"}
	if !slices.Equal(got, want) {
		t.Fatalf("merged file holds %v, want %v", got, want)
	}
}

// A round measured before the merged file exists (the clock sync that
// opens every connection comes before its first batch) creates no file
// and goes in right before the machine's first batch: host packets,
// remote_clock_sync, marker, then the sender's packets.
func TestRoundBeforeFirstBatchWaitsForIt(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stream(Identity{Machine: 9, Session: [16]byte{1}, Hostname: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	if ok, err := st.ClockSync(roundAt(uint64(10*time.Second), 100*time.Microsecond)); !ok || err != nil {
		t.Fatalf("first round: written %v, %v", ok, err)
	}
	if _, err := os.Stat(filepath.Join(dir, MergedName)); !os.IsNotExist(err) {
		t.Fatalf("a round alone made the merged file: %v", err)
	}
	d, n, b := batchOf(5)
	if ok, err := st.Append(1, d, n, b); !ok || err != nil {
		t.Fatal(ok, err)
	}
	pkts := packetsOf(t, filepath.Join(dir, MergedName))
	var kinds []string
	for _, p := range pkts {
		k := p.Kind()
		if p.PayloadField == 0 && p.MachineID != 0 && p.HasTimestamp {
			k = "marker"
		}
		kinds = append(kinds, k)
	}
	want := []string{"clock_snapshot", "system_info", "remote_clock_sync", "marker"}
	if len(kinds) < len(want)+1 || !slices.Equal(kinds[:len(want)], want) {
		t.Fatalf("merged file's packets %v, want %v then the batch", kinds, want)
	}
}

// A sender's own clock_snapshot stays out of a merged file (the host's
// is its first packet): trace_processor lost every packet of a relayed
// machine whose stream carried one (clock_sync_failure_no_path, 16,008 of
// 16,040 packets of a one-sender merged trace), and imported the same
// trace whole without it. The sender's other packets are all kept.
func TestMergedDropsSenderClockSnapshots(t *testing.T) {
	s, st := mergedStream(t) // batch 1: 5 packets
	snap := tracefile.AppendServiceHeader(nil, 0)
	snap = tracefile.AppendClockSnapshot(snap, []tracefile.Clock{{ID: tracefile.ClockBoottime, Timestamp: 1000}, {ID: tracefile.ClockMonotonic, Timestamp: 900}}, tracefile.ClockBoottime)
	data := tracefile.AppendRecord(nil, snap)
	d, n, b := batchOf(7, 8)
	data = append(data, d...)
	if ok, err := st.Append(2, data, n+1, b+uint64(len(snap))); !ok || err != nil {
		t.Fatal(ok, err)
	}
	var remote, remoteSnaps, hostSnaps int
	for _, p := range packetsOf(t, s.FileName(Identity{})) {
		switch {
		case p.MachineID != 0 && p.PayloadField == tracefile.FieldClockSnapshot:
			remoteSnaps++
		case p.MachineID != 0:
			remote++
		case p.PayloadField == tracefile.FieldClockSnapshot:
			hostSnaps++
		}
	}
	if remoteSnaps != 0 || hostSnaps != 1 || remote < 3 {
		t.Fatalf("merged file: %d clock snapshots of the sender, %d of the host, %d other sender packets; want 0, 1 and the 3 sent", remoteSnaps, hostSnaps, remote)
	}
}
