package tracefile

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/wire"
)

// LossContext is what a trace's echoed trace_config says about how its
// loss counters read. The counters keep their Perfetto meaning; the
// context only changes their headline: in a session that reads its ring
// buffers once, at stop or for a snapshot (no write_into_file, a flight
// recorder), overwritten chunks are the ring keeping its newest data —
// what the user asked for — and trace_processor raises no data-loss stat
// for them (it reports long_trace_mode_bytes_overwritten only for
// write_into_file sessions, see docs/import-rules.md).
type LossContext struct {
	Known         bool   // a trace_config packet was decoded
	WriteIntoFile bool   // the session streamed (write_into_file)
	Ring          []bool // per buffer index: fill policy RING_BUFFER (or unspecified, which defaults to it)
}

// DecodeLossContext reads the context from a trace_config payload (the
// TraceConfig message bytes).
func DecodeLossContext(traceConfig []byte) (LossContext, error) {
	c := LossContext{Known: true}
	it := wire.Fields(traceConfig)
	for it.Next() {
		fl := it.Field()
		switch {
		case fl.Num == tcWriteIntoFile && fl.Type == protowire.VarintType:
			c.WriteIntoFile = fl.Varint != 0
		case fl.Num == tcBuffers && fl.Type == protowire.BytesType:
			ring := true
			bt := wire.Fields(fl.Bytes)
			for bt.Next() {
				if bf := bt.Field(); bf.Num == bufFillPolicy && bf.Type == protowire.VarintType {
					ring = bf.Varint != fillDiscard
				}
			}
			if err := bt.Err(); err != nil {
				return LossContext{}, fmt.Errorf("trace_config.buffers[%d]: %w", len(c.Ring), err)
			}
			c.Ring = append(c.Ring, ring)
		}
	}
	if err := it.Err(); err != nil {
		return LossContext{}, fmt.Errorf("trace_config: %w", err)
	}
	return c, nil
}

// RingOverwrite reports whether a row counts chunks or bytes a read-once
// ring buffer overwrote: the oldest data making room for the newest, by
// design. Rows of a streaming session, of a discard buffer, or of a trace
// whose config is unknown are never ring overwrites.
func (c LossContext) RingOverwrite(r LossRow) bool {
	if !c.Known || c.WriteIntoFile || r.Index < 0 || r.Index >= len(c.Ring) || !c.Ring[r.Index] {
		return false
	}
	return r.Name == "chunks_overwritten" || r.Name == "bytes_overwritten"
}

// Lost reports whether r records data that was lost, as opposed to a ring
// overwrite (see RingOverwrite).
func (c LossContext) Lost(r LossRow) bool { return r.Lost() && !c.RingOverwrite(r) }

// LossHeadline sums up rows in one line: whether anything was lost, and
// the ring's overwrites apart from the losses.
func LossHeadline(rows []LossRow, c LossContext) string {
	lost, ring := 0, 0
	var ringChunks uint64
	for _, r := range rows {
		switch {
		case c.Lost(r):
			lost++
		case r.Lost() && c.RingOverwrite(r):
			ring++
			if r.Name == "chunks_overwritten" {
				ringChunks += r.Value
			}
		}
	}
	ringNote := ""
	if ring > 0 {
		ringNote = fmt.Sprintf("the ring buffer overwrote its oldest data (%d chunks, marked ~): what a ring buffer read once at the end does; trace_processor reports no loss for it", ringChunks)
	}
	switch {
	case lost == 0 && ring == 0:
		return "no data loss recorded"
	case lost == 0:
		return "no data loss recorded; " + ringNote
	case ring == 0:
		return fmt.Sprintf("DATA LOSS: %d counter(s) non-zero (marked !)", lost)
	}
	return fmt.Sprintf("DATA LOSS: %d counter(s) non-zero (marked !); apart from that, %s", lost, ringNote)
}
