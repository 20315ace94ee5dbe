package tpimport

import (
	"bytes"
	"testing"

	"github.com/tracepipe/tracepipe/internal/tracebuild"
)

// FuzzCheck feeds arbitrary bytes to Check: it must never panic, and every
// count it reports must stay within the packets it read.
func FuzzCheck(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x50, 0x02})
	// A merged trace: host snapshot, a remote round, remote events.
	f.Add(mergedSeed())
	f.Add(tracebuild.Trace(sdkTrace(1000, 5, 7, 2_000_000)...)) // clock 64, incremental, µs ticks
	f.Fuzz(func(t *testing.T, data []byte) {
		checkConsistent(t, data, Options{MaxRecordSize: 1 << 20})
		// Tiny bounds: sequences summarised, packets streamed.
		r := checkConsistent(t, data, Options{MaxRecordSize: 1 << 20, MaxSequences: 2, MaxPacketBuffer: 16})
		if r != nil {
			tracked := 0
			for _, s := range r.Sequences {
				if !s.Summarised && s.ID > serviceSequence { // 0 and 1 are always tracked
					tracked++
				}
			}
			if tracked > 2 {
				t.Fatalf("%d sequences tracked with MaxSequences 2", tracked)
			}
		}
	})
}

func checkConsistent(t *testing.T, data []byte, opts Options) *Report {
	r, err := Check(bytes.NewReader(data), opts)
	if err != nil {
		return nil
	}
	{
		var sum int64
		for _, s := range r.Sequences {
			if s.Imported < 0 || s.Imported > s.Packets || s.NeedsSkipped > s.NeedsTotal {
				t.Fatalf("inconsistent sequence %+v", s)
			}
			sum += s.Packets
		}
		if sum > r.Packets {
			t.Fatalf("sequences hold %d packets, trace %d", sum, r.Packets)
		}
	}
	return r
}
