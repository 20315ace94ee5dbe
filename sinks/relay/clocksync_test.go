package relay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/tracepipe/tracepipe/internal/tracebuild"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestClockSyncFrameRoundTrip(t *testing.T) {
	clocks := remote.ReadClocks(nil)
	f := appendClockSync(nil, 7, phaseUpdate, clocks)
	if f[0] != frameClockSync || int(binary.BigEndian.Uint32(f[1:])) != len(f)-frameHeaderSize {
		t.Fatalf("frame header % x", f[:frameHeaderSize])
	}
	round, phase, got, err := DecodeClockSync(f[frameHeaderSize:], nil)
	if err != nil || round != 7 || phase != phaseUpdate || len(got) != len(clocks) {
		t.Fatalf("decoded round %d phase %d %d clocks, %v", round, phase, len(got), err)
	}
	for i := range got {
		if got[i] != clocks[i] {
			t.Fatalf("clock %d: %+v, want %+v", i, got[i], clocks[i])
		}
	}
}

func TestDecodeClockSyncRejects(t *testing.T) {
	boot := tracefile.Clock{ID: tracefile.ClockBoottime, Timestamp: 5}
	payload := func(round uint32, phase byte, clocks ...tracefile.Clock) []byte {
		return appendClockSync(nil, round, phase, clocks)[frameHeaderSize:]
	}
	many := make([]tracefile.Clock, remote.MaxSyncClocks+1)
	for i := range many {
		many[i] = tracefile.Clock{ID: uint32(i + 1)}
	}
	for _, tc := range []struct {
		name, want string
		p          []byte
	}{
		{"short", "too short", []byte{0, 0, 0, 1, 1}},
		{"round 0", "round 0", payload(0, phasePing, boot)},
		{"phase", "phase 3", payload(1, 3, boot)},
		{"count", "clocks in", append(payload(1, phasePing, boot), 0)},
		{"too many", "at most 16", payload(1, phasePing, many...)},
		{"no clocks", "0 clocks", payload(1, phasePing)},
		{"clock id 0", "not a builtin clock", payload(1, phasePing, boot, tracefile.Clock{ID: 0})},
		{"sequence clock", "not a builtin clock", payload(1, phasePing, boot, tracefile.Clock{ID: 64})},
		{"twice", "listed twice", payload(1, phasePing, boot, boot)},
		{"no boottime", "no BOOTTIME", payload(1, phasePing, tracefile.Clock{ID: 3})},
		{"overflow", "overflows int64", payload(1, phasePing, tracefile.Clock{ID: 6, Timestamp: 1 << 63})},
	} {
		_, _, _, err := DecodeClockSync(tc.p, nil)
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a protocol error containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzDecodeClockSync: any clock-sync payload decodes or fails with a
// protocol error; a decoded one re-encodes to the same bytes.
func FuzzDecodeClockSync(f *testing.F) {
	f.Add(appendClockSync(nil, 1, phasePing, remote.ReadClocks(nil))[frameHeaderSize:])
	f.Add(appendClockSync(nil, 9, phaseUpdate, []tracefile.Clock{{ID: 6, Timestamp: 1}})[frameHeaderSize:])
	f.Add([]byte{0, 0, 0, 1, 2, 1, 6, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, p []byte) {
		round, phase, clocks, err := DecodeClockSync(p, nil)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if again := appendClockSync(nil, round, phase, clocks)[frameHeaderSize:]; !bytes.Equal(again, p) {
			t.Fatalf("payload %x re-encodes as %x", p, again)
		}
	})
}

// skewed reads this machine's clocks shifted by skew: a sender whose
// clocks differ from the receiver's by exactly skew.
func skewed(skew uint64) func([]tracefile.Clock) []tracefile.Clock {
	return func(dst []tracefile.Clock) []tracefile.Clock {
		start := len(dst)
		dst = remote.ReadClocks(dst)
		for i := start; i < len(dst); i++ {
			dst[i].Timestamp += skew
		}
		return dst
	}
}

// sentEvent is one event a sender wrote: its timestamp on the sender's
// clock and the receiver-side (true) BOOTTIME at which it happened.
type sentEvent struct {
	packet []byte
	ts     uint64
	host   uint64
}

// sendEvents writes what a tracepipe session sends: a service clock
// snapshot (sequence 1), a track descriptor and n slices (sequence 2) on
// BOOTTIME as the sender reads it (the true BOOTTIME plus skew), pausing
// every 20 slices until the sink's clock-sync rounds reach minRounds.
func sendEvents(t *testing.T, s *Sink, uuid, skew uint64, n int, minRounds uint64) []sentEvent {
	t.Helper()
	ctx := context.Background()
	now := func() uint64 { return remote.ReadClocks(nil)[0].Timestamp }
	h := now()
	head := [][]byte{
		Packet(UID(0), Seq(1), Snapshot(tracefile.ClockBoottime, C(6, h+skew), C(3, h+skew-1000))),
		Packet(UID(0), Seq(2), Descriptor(uuid, "work", false)),
	}
	if err := s.Write(ctx, head); err != nil {
		t.Fatal(err)
	}
	var sent []sentEvent
	for i := 0; i < n; i++ {
		for _, typ := range []uint64{SliceBegin, SliceEnd} {
			h := now()
			p := Packet(UID(0), Seq(2), Ts(h+skew), Event(typ, uuid, 0))
			sent = append(sent, sentEvent{packet: p, ts: h + skew, host: h})
			if err := s.Write(ctx, [][]byte{p}); err != nil {
				t.Fatal(err)
			}
		}
		if i%20 == 19 {
			s.Flush(ctx)
			testsupport.WaitUntil(t, "clock-sync rounds", 20*time.Second, func() bool {
				return s.ClockSync().Rounds.Load() >= minRounds || i < n-20
			})
		}
	}
	s.Flush(ctx)
	return sent
}

func clockSink(t *testing.T, addr, host string, period time.Duration, skew uint64) *Sink {
	t.Helper()
	s, err := New(Options{
		Address:    addr,
		Identity:   remote.Identity{Machine: remote.HashMachineID(host), Session: [16]byte{byte(len(host)), 2}, Hostname: host},
		BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond, CloseTimeout: 20 * time.Second,
		ClockSyncPeriod: period, clocks: skewed(skew), Logger: testsupport.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMergedTraceNeedsClockSync is the import half of the acceptance:
// two senders into a merging receiver. Without clock sync (senders as
// before protocol 3) check reports both machines as aligned only by
// trace_processor's assumption that their BOOTTIME is the receiver's
// (their markers keep the trace clock on the receiver, so nothing is
// dropped, but nothing is aligned either); with it the merged file is
// clean.
func TestMergedTraceNeedsClockSync(t *testing.T) {
	const n = 50
	for _, tc := range []struct {
		name   string
		period time.Duration
	}{{"without clock sync", -1}, {"with clock sync", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := remote.OpenStore(t.TempDir(), true)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			addr := startServer(t, store, ServerOptions{Logger: testsupport.Logger(t)})
			a := clockSink(t, addr, "alpha", tc.period, 3_600_000_000_000)
			b := clockSink(t, addr, "beta", tc.period, 0)
			sendEvents(t, a, 100, 3_600_000_000_000, n, 0)
			sendEvents(t, b, 200, 0, n, 0)
			closeSink(t, a)
			closeSink(t, b)
			name := store.FileName(a.Identity())
			r, err := tpimport.CheckFile(name, tpimport.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			_ = r.WriteText(&text)
			syncs := map[uint32]int{}
			for _, p := range receivedPackets(t, name) {
				if p.PayloadField == tracefile.FieldRemoteClockSync {
					syncs[p.MachineID]++
				}
			}
			if tc.period < 0 {
				machines := map[uint32]bool{}
				for _, f := range r.Findings {
					if f.Code == tpimport.CodeClockAssumedAligned {
						machines[f.Machine] = true
					}
				}
				if r.Clean() || !machines[1] || !machines[2] || len(r.Codes()) != 1 {
					t.Errorf("check without clock sync: codes %q, want only %s for machines 1 and 2\n%s", r.Codes(), tpimport.CodeClockAssumedAligned, text.String())
				}
				if len(syncs) != 0 || store.Stats.Clock.Rounds.Load() != 0 {
					t.Errorf("remote_clock_sync packets %v without clock sync", syncs)
				}
				return
			}
			if !r.Clean() {
				t.Errorf("merged trace with clock sync is not clean:\n%s", text.String())
			}
			if syncs[1] == 0 || syncs[2] == 0 || len(syncs) != 2 {
				t.Errorf("remote_clock_sync packets per machine_id %v, want machines 1 and 2", syncs)
			}
		})
	}
}

// TestMergedTimestampsAlign is the clock half of the acceptance: a sender
// whose clocks run one hour and 12,345 ns ahead of the receiver's. Its
// packets reach the merged file unchanged (its own timestamps), and every
// round written yields, as trace_processor computes it, an offset within
// the round's measured round trip of the true one, so that each event
// lands within the round trip of when it really happened on the
// receiver's clock.
func TestMergedTimestampsAlign(t *testing.T) {
	const skew = 3_600_000_012_345
	store, err := remote.OpenStore(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	store.ClockSyncSpacing = time.Nanosecond
	addr := startServer(t, store, ServerOptions{Logger: testsupport.Logger(t)})
	s := clockSink(t, addr, "skewed", 5*time.Millisecond, skew)
	sent := sendEvents(t, s, 100, skew, 200, 3)
	closeSink(t, s)
	if got := s.ClockSync().Rounds.Load(); got < 3 {
		t.Fatalf("%d rounds completed, want at least 3 (period 5 ms)", got)
	}
	if w, k := store.Stats.Clock.Rounds.Load(), store.Stats.Clock.Skipped.Load(); w == 0 || w+k > s.ClockSync().Rounds.Load() {
		t.Fatalf("store wrote %d rounds and skipped %d of the sender's %d", w, k, s.ClockSync().Rounds.Load())
	}

	name := store.FileName(s.Identity())
	pkts, err := readAllPackets(name)
	if err != nil {
		t.Fatal(err)
	}
	type round struct {
		offset, bound int64
		host          uint64 // h1
	}
	var rounds []round
	next := 0 // next sent event expected in the file
	for _, p := range pkts {
		info, _ := tracefile.DecodePacket(p)
		switch {
		case info.PayloadField == tracefile.FieldRemoteClockSync:
			off, err := tpimport.RemoteClockOffsets(info.Payload)
			if err != nil || len(off) == 0 {
				t.Fatalf("remote_clock_sync yields %v, %v", off, err)
			}
			bound, h1 := roundBounds(t, info.Payload)
			rounds = append(rounds, round{offset: off[tracefile.ClockBoottime], bound: bound, host: h1})
			if d := off[tracefile.ClockBoottime] - skew; d < -bound || d > bound {
				t.Errorf("round %d: BOOTTIME offset %d is %d ns from the true %d, beyond its round trip %d ns", len(rounds), off[tracefile.ClockBoottime], d, skew, bound)
			}
		case info.PayloadField == tracefile.FieldTrackEvent:
			if len(rounds) == 0 {
				t.Fatal("an event precedes the first remote_clock_sync")
			}
			e := sent[next]
			next++
			if !bytes.HasPrefix(p, e.packet) || info.Timestamp != e.ts {
				t.Fatalf("event %d: merged packet %x (ts %d) does not start with the sent %x (ts %d)", next, p, info.Timestamp, e.packet, e.ts)
			}
			r := rounds[len(rounds)-1]
			if d := int64(info.Timestamp) - r.offset - int64(e.host); d < -r.bound || d > r.bound {
				t.Errorf("event %d: aligned to %d, %d ns from when it happened (%d); round trip %d ns", next, int64(info.Timestamp)-r.offset, d, e.host, r.bound)
			}
		}
	}
	if next != len(sent) {
		t.Fatalf("%d of %d events in the merged file", next, len(sent))
	}
	if len(rounds) < 2 {
		t.Errorf("%d rounds written, want the first and later ones", len(rounds))
	}
	r, err := tpimport.CheckFile(name, tpimport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() {
		var text strings.Builder
		_ = r.WriteText(&text)
		t.Errorf("merged trace is not clean:\n%s", text.String())
	}
}

// roundBounds returns the larger of a one-round remote_clock_sync's client
// and host round trips (c2 − c1, h2 − h1, BOOTTIME), and h1.
func roundBounds(t *testing.T, payload []byte) (int64, uint64) {
	t.Helper()
	var boot [2][2]uint64 // [half][client, host]
	half := 0
	err := walkFields(payload, func(num int, b []byte) {
		if num != 1 || half > 1 {
			return
		}
		_ = walkFields(b, func(side int, snap []byte) {
			_ = walkFields(snap, func(_ int, clock []byte) {
				id, ts := clockFields(clock)
				if id == tracefile.ClockBoottime {
					boot[half][side-2] = ts
				}
			})
		})
		half++
	})
	if err != nil || half != 2 {
		t.Fatalf("remote_clock_sync of %d halves: %v", half, err)
	}
	return max(int64(boot[1][0]-boot[0][0]), int64(boot[1][1]-boot[0][1])), boot[0][1]
}

// TestClockSyncOldReceiver: a receiver that announces protocol 2 gets no
// clock-sync frame (it would refuse one), the batches flow, and the sink
// says once why its merged trace cannot align this machine.
func TestClockSyncOldReceiver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		fr := newFrameReader(c)
		if typ, _, err := fr.next(); err != nil || typ != frameHello {
			got <- errors.New("no hello")
			return
		}
		ack := appendFrameHeader(nil, frameHelloAck, 10)
		ack = binary.BigEndian.AppendUint16(ack, 2)
		c.Write(binary.BigEndian.AppendUint64(ack, 0))
		for {
			typ, p, err := fr.next()
			if err != nil {
				got <- err
				return
			}
			if typ != frameBatch {
				got <- errors.New("frame type " + string(rune('0'+typ)) + " sent to a version-2 receiver")
				return
			}
			seq, _, _, _, _ := DecodeBatch(p)
			c.Write(appendSeqFrame(nil, frameAck, seq))
		}
	}()
	msgs := &testsupport.Messages{}
	s, err := New(Options{Address: ln.Addr().String(), Identity: remote.Identity{Machine: 5, Hostname: "new"},
		ClockSyncPeriod: time.Millisecond, Logger: slog.New(msgs), CloseTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		s.Write(context.Background(), [][]byte{testPacket(2, uint64(i), 100)})
		s.Flush(context.Background())
		testsupport.WaitUntil(t, "the batch acknowledged", 10*time.Second, func() bool { return s.Stats().PacketsWritten == uint64(i+1) })
	}
	closeSink(t, s)
	if st := s.Stats(); st.PacketsWritten != 5 {
		t.Errorf("stats %+v, want 5 packets written", st)
	}
	ln.Close()
	select {
	case err := <-got:
		if !errors.Is(err, io.EOF) {
			t.Errorf("receiver: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("receiver did not end")
	}
	n := 0
	for _, m := range msgs.All() {
		if strings.Contains(m, "receiver speaks relay protocol 2, clock sync needs 3") {
			n++
		}
	}
	if n != 1 || s.ClockSync().Rounds.Load() != 0 {
		t.Errorf("%d warnings about the old receiver (want 1), %d rounds (want 0): %q", n, s.ClockSync().Rounds.Load(), msgs.All())
	}
}

// TestServerClockSyncErrors: a clock-sync frame out of turn ends the
// connection with an error frame naming it, and writes nothing.
func TestServerClockSyncErrors(t *testing.T) {
	boot := []tracefile.Clock{{ID: tracefile.ClockBoottime, Timestamp: 10}}
	hello := appendHello(nil, Hello{Version: MinProtocolVersion, ID: remote.Identity{Machine: 42, Hostname: "h"}})
	for _, tc := range []struct {
		name, want string
		frames     []byte
	}{
		{"update without ping", "clock-sync update of round 1, the open round is 0", appendClockSync(nil, 1, phaseUpdate, boot)},
		{"ping not increasing", "clock-sync ping of round 1 after round 1",
			appendClockSync(appendClockSync(nil, 1, phasePing, boot), 1, phasePing, boot)},
		{"update of another round", "clock-sync update of round 2, the open round is 1",
			appendClockSync(appendClockSync(nil, 1, phasePing, boot), 2, phaseUpdate, boot)},
		{"client clock backwards", "client BOOTTIME runs backwards",
			appendClockSync(appendClockSync(nil, 1, phasePing, boot), 1, phaseUpdate, []tracefile.Clock{{ID: 6, Timestamp: 9}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := remote.OpenStore(t.TempDir(), true)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			srv := NewServer(ServerOptions{Store: store})
			client, server := net.Pipe()
			done := make(chan error, 1)
			go func() { done <- srv.handle(server, &connInfo{}) }()
			go func() {
				client.Write(hello)
				client.Write(tc.frames)
			}()
			fr := newFrameReader(client)
			var last []byte
			for {
				client.SetReadDeadline(time.Now().Add(10 * time.Second))
				typ, p, err := fr.next()
				if err != nil {
					t.Fatalf("no error frame: %v", err)
				}
				if typ == frameError {
					last = p
					break
				}
			}
			if !strings.Contains(string(last), tc.want) {
				t.Errorf("error frame %q, want %q", last, tc.want)
			}
			client.Close()
			if err := <-done; !errors.Is(err, ErrProtocol) {
				t.Errorf("handler: %v, want a protocol error", err)
			}
			if store.Stats.Clock.Rounds.Load() != 0 {
				t.Error("a round was written")
			}
		})
	}
}

func readAllPackets(name string) ([][]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return tracefile.ReadAll(f)
}

// walkFields calls fn with each length-delimited field of message b.
func walkFields(b []byte, fn func(num int, payload []byte)) error {
	it := wire.Fields(b)
	for it.Next() {
		if f := it.Field(); f.Type == protowire.BytesType {
			fn(int(f.Num), f.Bytes)
		}
	}
	return it.Err()
}

// clockFields reads a ClockSnapshot.Clock's clock_id and timestamp.
func clockFields(b []byte) (id uint32, ts uint64) {
	it := wire.Fields(b)
	for it.Next() {
		switch f := it.Field(); f.Num {
		case 1:
			id = uint32(f.Varint)
		case 2:
			ts = f.Varint
		}
	}
	return id, ts
}
