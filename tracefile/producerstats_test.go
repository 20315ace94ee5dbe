package tracefile

import (
	"reflect"
	"testing"
)

// Per-producer fault attribution survives the round trip and shows up in
// the loss report under the data source's index and source.
func TestProducerStatsRoundTrip(t *testing.T) {
	ts := TraceStats{Tracepipe: &TracepipeStats{DataSourceErrors: 2, Producers: []ProducerStats{
		{Index: 2, Source: "./my-plugin", InvalidPackets: 5, SMBChunksRejected: 1, Died: 1, Error: "was killed by signal 9 (killed)"},
		{Index: 0, Source: "my.source", CommitsMalformed: 3, ChunksDiscarded: 4},
	}}}
	enc := AppendTraceStats(nil, &ts)
	got, ok, err := DecodeTraceStatsPacket(enc)
	if err != nil || !ok {
		t.Fatalf("decode: ok=%v %v", ok, err)
	}
	if !reflect.DeepEqual(got.Tracepipe.Producers, ts.Tracepipe.Producers) {
		t.Fatalf("round trip:\n%+v\n%+v", got.Tracepipe.Producers, ts.Tracepipe.Producers)
	}
	found := false
	for _, r := range LossReport(got) {
		if r.Name == "data_sources[2] (./my-plugin).invalid_packets" && r.Value == 5 && r.Lost() {
			found = true
		}
	}
	if !found {
		t.Fatal("the loss report does not attribute invalid_packets to data_sources[2] (./my-plugin)")
	}
}
