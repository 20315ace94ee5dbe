package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"BytesOverwritten":  "bytes_overwritten",
		"SMBChunksRejected": "smb_chunks_rejected",
		"PacketsDropped":    "packets_dropped",
		"ID":                "id",
	} {
		if got := SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

type fixedStatus pipeline.Status

func (f fixedStatus) Status() pipeline.Status { return pipeline.Status(f) }

// The exposition carries the numbers of the Status it was given.
func TestSessionExposition(t *testing.T) {
	st := pipeline.Status{
		Packets: 12,
		Buffers: []pipeline.BufferStatus{{Name: "main", Size: 4096, Unread: 100}},
		Memory:  pipeline.MemoryStatus{Buffers: 4096, SMBs: 262144, Clones: 8192, Batches: 5 << 20},
		Stats: tracefile.TraceStats{
			BufferStats: []tracefile.BufferStats{{ChunksOverwritten: 7}},
			Tracepipe:   &tracefile.TracepipeStats{SinkPacketsDropped: 3},
		},
		Producers: []pipeline.ProducerStatus{{ID: 1, DataSource: "x", PacketsDropped: 5}},
		Sinks: []pipeline.SinkStatus{{Name: "net", Destination: "relay tcp://h:1", QueueLen: 2, QueueCap: 8,
			Stats: sinks.SinkStats{PacketsDroppedQueue: 9}, Extra: map[string]float64{"sink_queue_batches": 4}}},
	}
	rec := httptest.NewRecorder()
	Handler(Session(fixedStatus(st))).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		"tracepipe_session_packets_out_total 12\n",
		`tracepipe_buffer_unread_bytes{buffer="0",name="main"} 100`,
		`tracepipe_buffer_chunks_overwritten_total{buffer="0",name="main"} 7`,
		"tracepipe_trace_stats_sink_packets_dropped_total 3\n",
		`tracepipe_producer_packets_dropped_total{buffer="0",data_source="x",producer="1"} 5`,
		`tracepipe_sink_packets_dropped_queue_total{destination="relay tcp://h:1",sink="net"} 9`,
		`tracepipe_sink_lane_queue_batches{destination="relay tcp://h:1",sink="net"} 2`,
		`tracepipe_sink_queue_batches{destination="relay tcp://h:1",sink="net"} 4`,
		`tracepipe_session_memory_bytes{component="buffers"} 4096`,
		`tracepipe_session_memory_bytes{component="smbs"} 262144`,
		`tracepipe_session_memory_bytes{component="clones"} 8192`,
		`tracepipe_session_memory_bytes{component="batches"} 5.24288e+06`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

// Sessions labels each session's samples with its id, so that two
// sessions' series never collide.
func TestSessionsLabelEach(t *testing.T) {
	a := fixedStatus(pipeline.Status{Memory: pipeline.MemoryStatus{Buffers: 4096, Batches: 8192}})
	b := fixedStatus(pipeline.Status{Memory: pipeline.MemoryStatus{Buffers: 65536}})
	rec := httptest.NewRecorder()
	Handler(Sessions(func() []LabeledSession { return []LabeledSession{{ID: "1", Src: a}, {ID: "2", Src: b}} })).
		ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`tracepipe_session_memory_bytes{component="buffers",session="1"} 4096`,
		`tracepipe_session_memory_bytes{component="batches",session="1"} 8192`,
		`tracepipe_session_memory_bytes{component="buffers",session="2"} 65536`,
		`tracepipe_session_memory_bytes{component="batches",session="2"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}
