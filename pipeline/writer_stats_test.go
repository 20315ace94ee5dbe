package pipeline

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

// trace_processor attributes losses per sequence only through
// trace_stats.writer_stats, and only for sequences it saw before the
// trace_stats packet (reference §6). So: every data sequence in the file
// has a writer_stats entry naming the buffer it was written into (the
// source writing into buffer 1 writes 300-byte payloads, the other 100),
// and the last trace_stats packet follows every data packet — in
// single-read and in streaming mode.
func TestWriterStatsCoverEverySequence(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "trace.pftrace")
			mode := "write_into_file: false"
			if streaming {
				mode = "write_into_file: true\nfile_write_period: 100ms\nstats_period: 1s"
			}
			runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`%s
buffers: [{size_kb: 256}, {size_kb: 256}]
data_sources:
  - {name: test.scripted, target_buffer: 0, buffer_exhausted_policy: stall, config: {writers: 3, packets: 200, sizes: [100]}}
  - {name: test.scripted, target_buffer: 1, buffer_exhausted_policy: stall, config: {writers: 2, packets: 200, sizes: [300]}}
sinks: [{type: file, path: %q}]
`, mode, out)))
			pkts := tracetest.ReadTrace(t, out)
			bufferOf := map[uint64]uint32{} // from the payload size
			lastData, lastStats := -1, -1
			var stats tracefile.TraceStats
			for i, p := range pkts {
				switch {
				case p.Info.PayloadField == tracefile.FieldTraceStats:
					ts, ok, err := tracefile.DecodeTraceStatsPacket(p.Raw)
					if err != nil || !ok {
						t.Fatal(err)
					}
					stats, lastStats = ts, i
				case p.Info.SequenceID >= 2:
					lastData = i
					if p.Info.PayloadField == tracefile.FieldForTesting {
						bufferOf[uint64(p.Info.SequenceID)] = map[bool]uint32{false: 0, true: 1}[len(p.Info.Payload) == 300]
					}
				}
			}
			if lastData < 0 || lastStats < lastData {
				t.Fatalf("last data packet at %d, last trace_stats at %d", lastData, lastStats)
			}
			got := map[uint64]uint32{}
			for _, w := range stats.WriterStats {
				got[w.SequenceID] = w.Buffer
			}
			seen := map[uint32]bool{}
			for _, p := range pkts {
				if p.Info.SequenceID >= 2 {
					seen[p.Info.SequenceID] = true
				}
			}
			if len(seen) != 5 {
				t.Fatalf("%d data sequences, want 5", len(seen))
			}
			for seq := range seen {
				b, ok := got[uint64(seq)]
				if !ok || b != bufferOf[uint64(seq)] {
					t.Errorf("sequence %d: writer_stats buffer %d (present %v), written into buffer %d", seq, b, ok, bufferOf[uint64(seq)])
				}
			}
		})
	}
}
