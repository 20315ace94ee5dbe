package relay

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// A snapshot's hello is version 2 with the snapshot tail; an ordinary
// session's stays version 1, byte for byte what a version-1 receiver
// accepts; both decode back to what was sent.
func TestHelloSnapshotTail(t *testing.T) {
	live := remote.Identity{Machine: 7, Session: [16]byte{1}, Hostname: "h"}
	snap := live
	snap.Session = [16]byte{2}
	snap.Snapshot = sinks.Snapshot{Of: live.Session, N: 3, Trigger: "slow_frame"}
	for _, id := range []remote.Identity{live, snap} {
		v := helloVersion(id)
		p := appendHello(nil, Hello{Version: v, ID: id})[frameHeaderSize:]
		if want := 31 + len(id.Hostname); v == 1 && len(p) != want {
			t.Fatalf("version-1 hello of %d bytes, want %d", len(p), want)
		}
		h, err := DecodeHello(p)
		if err != nil {
			t.Fatal(err)
		}
		if h.Version != v || h.ID != id {
			t.Fatalf("decoded %+v, sent version %d %+v", h, v, id)
		}
	}
	if helloVersion(live) != 1 || helloVersion(snap) != 2 {
		t.Fatal("a snapshot must announce version 2 and only a snapshot")
	}
	bad := appendHello(nil, Hello{Version: 2, ID: live})[frameHeaderSize:] // snapshot number 0
	if _, err := DecodeHello(bad); err == nil {
		t.Fatal("a version-2 hello with snapshot number 0 was accepted")
	}
}

// A relay sink opened for a snapshot (sinks.Env.Snapshot) delivers it as
// a trace of its own, named by the snapshot pattern beside the live
// session's file; also when the receiver merges, since a snapshot
// repeats what the live trace holds.
func TestSnapshotStoredSeparately(t *testing.T) {
	for _, merge := range []bool{false, true} {
		dir := t.TempDir()
		store, err := remote.OpenStore(dir, merge)
		if err != nil {
			t.Fatal(err)
		}
		addr := startServer(t, store, ServerOptions{})
		b, err := factory(map[string]any{"address": addr, "hostname": "snapper", "machine_id": 99})
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
		snap := open(sinks.Env{SessionUUID: [16]byte{0xcd, 2}, Snapshot: sinks.Snapshot{Of: liveID, N: 1, Trigger: "alert: high"}})
		sendRange(t, live, 0, 100, 50, false)
		sendRange(t, snap, 1000, 1040, 50, false)
		closeSink(t, live)
		closeSink(t, snap)
		liveName := filepath.Join(dir, "snapper-0000000000000063-ab010000000000000000000000000000.pftrace")
		if merge {
			liveName = filepath.Join(dir, remote.MergedName)
		}
		snapName := filepath.Join(dir, "snapper-0000000000000063-ab010000000000000000000000000000.snap-1-alert_high.pftrace")
		if got := traceFiles(t, dir); !slices.Equal(got, slices.Sorted(slices.Values([]string{liveName, snapName}))) {
			t.Fatalf("merge=%v: files %v, want %s and %s", merge, got, liveName, snapName)
		}
		if n := len(readPackets(t, snapName)); n != 40 {
			t.Fatalf("merge=%v: the snapshot's file holds %d packets, want its 40", merge, n)
		}
		if n := len(readPackets(t, liveName)); n != 100 {
			t.Fatalf("merge=%v: the live file holds %d packets, want its 100", merge, n)
		}
	}
}
