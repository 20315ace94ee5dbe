package tracefile

import (
	"reflect"
	"testing"
)

// Another sink's loss survives the round trip and makes this copy's loss
// report say which destination is incomplete; the info counters next to
// it (reconnects, refused triggers) are not a loss.
func TestPeerSinkStatsRoundTrip(t *testing.T) {
	ts := TraceStats{Tracepipe: &TracepipeStats{SinkReconnects: 2, TriggersRefused: 4, SnapshotsRefused: 3, AlertRequestsRefused: 5,
		PeerSinks: []PeerSinkStats{
			{Index: 1, Name: "sinks[1]", Destination: "nats://127.0.0.1:4222 t.x", PacketsDropped: 4059, Errors: 3, Failed: 1, Error: "no JetStream stream listens on subject \"t.x\""},
			{Index: 2, Name: "up", Destination: "relay tcp://h:1", PacketsWritten: 10, Reconnects: 1},
		}}}
	got, ok, err := DecodeTraceStatsPacket(AppendTraceStats(nil, &ts))
	if err != nil || !ok {
		t.Fatalf("decode: ok=%v %v", ok, err)
	}
	if !reflect.DeepEqual(got.Tracepipe, ts.Tracepipe) {
		t.Fatalf("round trip:\n%+v\n%+v", got.Tracepipe, ts.Tracepipe)
	}
	lost := map[string]uint64{}
	for _, r := range LossReport(got) {
		if r.Lost() {
			lost[r.Name] = r.Value
		}
	}
	want := map[string]uint64{
		"sinks[1] (nats://127.0.0.1:4222 t.x).packets_dropped": 4059,
		"sinks[1] (nats://127.0.0.1:4222 t.x).failed":          1,
	}
	if !reflect.DeepEqual(lost, want) {
		t.Fatalf("lost rows %v, want %v", lost, want)
	}
}
