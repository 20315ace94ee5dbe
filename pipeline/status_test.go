package pipeline

import (
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// A flight recorder's ring overwrites are counted apart from its losses
// (`tracepipe sessions` showed LOSSES 763734 for a healthy one); in a
// streaming session, or in a discard buffer, they stay losses.
func TestLossTotalsTellRingOverwritesApart(t *testing.T) {
	ts := tracefile.TraceStats{
		InvalidPackets: 2,
		BufferStats:    []tracefile.BufferStats{{ChunksOverwritten: 763734, BytesOverwritten: 1 << 32}, {ChunksOverwritten: 7}},
	}
	rows := tracefile.LossReport(ts)
	for _, c := range []struct {
		name          string
		cfg           Config
		losses, rings uint64
	}{
		{"read once", Config{Buffers: []BufferConfig{{FillPolicy: FillPolicyRingBuffer}, {FillPolicy: FillPolicyRingBuffer}}}, 763734 + 7 + 2, 763734 + 7},
		{"streaming", Config{WriteIntoFile: true, Buffers: []BufferConfig{{FillPolicy: FillPolicyRingBuffer}, {FillPolicy: FillPolicyRingBuffer}}}, 763734 + 7 + 2, 0},
		{"discard", Config{Buffers: []BufferConfig{{FillPolicy: FillPolicyRingBuffer}, {FillPolicy: FillPolicyDiscard}}}, 763734 + 7 + 2, 763734},
	} {
		losses, rings := c.cfg.lossTotals(rows)
		if losses != c.losses || rings != c.rings {
			t.Errorf("%s: losses %d, ring overwrites %d; want %d, %d", c.name, losses, rings, c.losses, c.rings)
		}
	}
}
