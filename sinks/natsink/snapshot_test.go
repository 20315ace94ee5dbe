package natsink

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// A nats sink opened for a snapshot (sinks.Env.Snapshot) marks its
// messages with the snapshot headers; serve --from-nats (Reader into a
// Store) writes them to a file of their own, named by the snapshot
// pattern beside the live session's, while the live session's messages
// on the same subject still go to the live file.
func TestNATSSnapshotStoredSeparately(t *testing.T) {
	srv := startNATS(t)
	b, err := factory(map[string]any{"url": srv.URL(), "subject": "traces.snap", "create_stream": true, "stream": "T",
		"hostname": "natshost", "machine_id": 77})
	if err != nil {
		t.Fatal(err)
	}
	liveID := [16]byte{0xab, 1}
	open := func(env sinks.Env) *Sink {
		sk, err := b.Open(env)
		if err != nil {
			t.Fatal(err)
		}
		return sk.(*Sink)
	}
	live := open(sinks.Env{SessionUUID: liveID})
	snap := open(sinks.Env{SessionUUID: [16]byte{0xcd, 2}, Snapshot: sinks.Snapshot{Of: liveID, N: 4, Trigger: "High\nLatency"}})
	send(t, live, nil, 0, 100, true)
	send(t, snap, nil, 1000, 1030, true)
	for _, s := range []*Sink{live, snap} {
		if err := s.Close(bg); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.PacketsDropped() != 0 {
			t.Fatalf("sink stats %+v", st)
		}
	}
	want := live.out.Acked() + snap.out.Acked()
	got := readBack(t, srv.URL(), "traces.snap", snap.Identity(), want)
	if len(got) != 30 {
		t.Fatalf("the snapshot's file holds %d packets, want its 30", len(got))
	}
	id := snap.Identity()
	if id.Snapshot.Trigger != "High\nLatency" {
		t.Fatalf("sink identity %+v", id)
	}
}

// Snapshot headers parse all three together or not at all, strictly.
func TestParseSnapshotHeaders(t *testing.T) {
	base := func() nats.Header {
		return nats.Header{HeaderMachine: {"00000000000000ff"}, HeaderSession: {"0909000000000000000000000000000a"}, HeaderHost: {"h"}, HeaderSeq: {"1"}}
	}
	h := base()
	setSnapshotHeaders(h, sinks.Snapshot{Of: [16]byte{1}, N: 2, Trigger: "a\x00b\r\nc"})
	id, _, err := ParseHeaders(h)
	if err != nil {
		t.Fatal(err)
	}
	if id.Snapshot != (sinks.Snapshot{Of: [16]byte{1}, N: 2, Trigger: "a_b__c"}) {
		t.Fatalf("parsed %+v", id.Snapshot)
	}
	if id, _, err := ParseHeaders(base()); err != nil || !id.Snapshot.IsZero() {
		t.Fatalf("an ordinary message: %+v %v", id, err)
	}
	for _, bad := range []func(nats.Header){
		func(h nats.Header) { delete(h, HeaderTrigger) },
		func(h nats.Header) { h[HeaderSnapshot] = []string{"0"} },
		func(h nats.Header) { h[HeaderSnapshot] = []string{"4294967296"} },
		func(h nats.Header) { h[HeaderSnapshotOf] = []string{"zz"} },
		func(h nats.Header) { h[HeaderTrigger] = []string{"\xff"} },
	} {
		h := base()
		setSnapshotHeaders(h, sinks.Snapshot{Of: [16]byte{1}, N: 2, Trigger: "t"})
		bad(h)
		if _, _, err := ParseHeaders(h); err == nil {
			t.Fatalf("accepted %v", h)
		}
	}
}

// FuzzParseSnapshotHeaders: the snapshot headers of a message are
// untrusted; they parse or fail, and a parsed snapshot is well formed.
func FuzzParseSnapshotHeaders(f *testing.F) {
	f.Add("01000000000000000000000000000000", "2", "slow_frame")
	f.Add("zz", "0", "")
	f.Fuzz(func(t *testing.T, of, n, trigger string) {
		h := nats.Header{HeaderMachine: {"00000000000000ff"}, HeaderSession: {"0909000000000000000000000000000a"}, HeaderHost: {"h"}, HeaderSeq: {"1"},
			HeaderSnapshotOf: {of}, HeaderSnapshot: {n}, HeaderTrigger: {trigger}}
		id, _, err := ParseHeaders(h)
		if err != nil {
			return
		}
		if id.Snapshot.IsZero() || len(id.Snapshot.Trigger) > sinks.MaxSnapshotTrigger {
			t.Fatalf("accepted %+v", id.Snapshot)
		}
		if name := (&remote.Store{}).FileName(id); name == "" {
			t.Fatal("no file name")
		}
	})
}
