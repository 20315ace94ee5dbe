package pipeline

import (
	"testing"

	"github.com/tracepipe/tracepipe/config"
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
		cfg           config.Config
		losses, rings uint64
	}{
		{"read once", config.Config{Buffers: []config.BufferConfig{{FillPolicy: config.FillPolicyRingBuffer}, {FillPolicy: config.FillPolicyRingBuffer}}}, 763734 + 7 + 2, 763734 + 7},
		{"streaming", config.Config{WriteIntoFile: true, Buffers: []config.BufferConfig{{FillPolicy: config.FillPolicyRingBuffer}, {FillPolicy: config.FillPolicyRingBuffer}}}, 763734 + 7 + 2, 0},
		{"discard", config.Config{Buffers: []config.BufferConfig{{FillPolicy: config.FillPolicyRingBuffer}, {FillPolicy: config.FillPolicyDiscard}}}, 763734 + 7 + 2, 763734},
	} {
		losses, rings := lossTotals(&c.cfg, rows)
		if losses != c.losses || rings != c.rings {
			t.Errorf("%s: losses %d, ring overwrites %d; want %d, %d", c.name, losses, rings, c.losses, c.rings)
		}
	}
}
