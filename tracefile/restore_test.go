package tracefile

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// restoreState is an incremental state as a fold produces it, polluted with
// the fields a restore packet must not repeat.
func restoreState() []byte {
	var b []byte
	b = wire.AppendVarint(b, FieldTimestamp, 99)
	b = wire.AppendNested(b, FieldInternedData, func(b []byte) []byte {
		return wire.AppendNested(b, 2, func(b []byte) []byte { // event_names {iid 1, name "foo"}
			b = wire.AppendVarint(b, 1, 1)
			return protowire.AppendString(protowire.AppendTag(b, 2, protowire.BytesType), "foo")
		})
	})
	b = wire.AppendVarint(b, FieldSequenceFlags, SeqNeedsIncrementalState|4)
	b = wire.AppendNested(b, FieldTracePacketDefaults, func(b []byte) []byte { return wire.AppendVarint(b, 58, 6) })
	b = AppendTrusted(b, Trusted{UID: 7, SequenceID: 3, PID: 4, HasPID: true, PreviousPacketDropped: 65})
	b = wire.AppendBool(b, FieldFirstPacketOnSequence, true)
	b = wire.AppendBool(b, FieldIncrementalStateClear, true)
	return b
}

func TestAppendRestorePacket(t *testing.T) {
	tr := Trusted{UID: 1000, SequenceID: 12, PID: 55, HasPID: true, PreviousPacketDropped: LossPresent | LossOverwrite}
	prefix := []byte{0xaa}
	got := AppendRestorePacket(bytes.Clone(prefix), restoreState(), tr)
	if got[0] != 0xaa {
		t.Fatal("dst prefix overwritten")
	}
	pkt := got[1:]
	info, err := DecodePacket(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if info.SequenceFlags != SeqIncrementalStateCleared|4 {
		t.Errorf("sequence_flags = %d, want CLEARED plus the state's other bit 4, without NEEDS", info.SequenceFlags)
	}
	if info.SequenceID != 12 || info.TrustedUID != 1000 || info.TrustedPID != 55 || info.PreviousPacketDropped != 65 {
		t.Errorf("trusted fields %+v, want those of %+v", info, tr)
	}
	if info.HasTimestamp || info.TimestampClockID != 0 || info.FirstPacketOnSequence {
		t.Errorf("per-packet fields copied from the state: %+v", info)
	}
	if info.Kind() != "trace_packet_defaults" {
		t.Errorf("kind %q", info.Kind())
	}
	// Exactly one occurrence of each stamped field: nothing from the state.
	counts := map[protowire.Number]int{}
	for off := 0; off < len(pkt); {
		num, typ, n := protowire.ConsumeTag(pkt[off:])
		m := protowire.ConsumeFieldValue(num, typ, pkt[off+n:])
		if n < 0 || m < 0 {
			t.Fatalf("malformed output at %d", off)
		}
		counts[num]++
		off += n + m
	}
	for _, f := range []protowire.Number{FieldTrustedUID, FieldTrustedSequenceID, FieldTrustedPID, FieldPreviousPacketDropped, FieldSequenceFlags, FieldInternedData, FieldTracePacketDefaults} {
		if counts[f] != 1 {
			t.Errorf("field %s occurs %d times, want 1", PacketFieldName(int32(f)), counts[f])
		}
	}
	if counts[FieldIncrementalStateClear] != 0 {
		t.Error("deprecated incremental_state_cleared copied")
	}

	// An empty state still gives a valid clearing packet, without loss.
	empty := AppendRestorePacket(nil, nil, Trusted{SequenceID: 5})
	info, err = DecodePacket(empty)
	if err != nil || info.SequenceFlags != 1 || info.SequenceID != 5 || info.PreviousPacketDropped != 0 {
		t.Fatalf("empty state: %+v %v", info, err)
	}

	// Copying stops at a malformed field.
	bad := append(wire.AppendVarint(nil, 99, 1), 0x5a, 0x05, 0x01)
	out := AppendRestorePacket(nil, bad, Trusted{SequenceID: 5})
	if _, err := DecodePacket(out); err != nil {
		t.Fatalf("malformed state gave a malformed packet: %v", err)
	}
	if !bytes.HasPrefix(out, wire.AppendVarint(nil, 99, 1)) || bytes.Contains(out, []byte{0x5a, 0x05}) {
		t.Fatalf("want the well-formed prefix only, got % x", out)
	}
}

func TestAppendRestorePacketNoAlloc(t *testing.T) {
	state := restoreState()
	buf := make([]byte, 0, 256)
	tr := Trusted{SequenceID: 9, PreviousPacketDropped: 1}
	if n := testing.AllocsPerRun(100, func() { buf = AppendRestorePacket(buf[:0], state, tr) }); n != 0 {
		t.Fatalf("%v allocations per restore packet", n)
	}
}

func FuzzAppendRestorePacket(f *testing.F) {
	f.Add(restoreState(), uint32(3), uint32(65))
	f.Fuzz(func(t *testing.T, state []byte, seq, loss uint32) {
		tr := Trusted{UID: 2, SequenceID: seq, PID: 8, HasPID: true, PreviousPacketDropped: loss}
		pkt := AppendRestorePacket(nil, state, tr)
		info, err := DecodePacket(pkt)
		if err != nil {
			t.Fatalf("restore packet malformed: %v", err)
		}
		if info.SequenceFlags&SeqIncrementalStateCleared == 0 || info.SequenceFlags&SeqNeedsIncrementalState != 0 {
			t.Fatalf("flags %d", info.SequenceFlags)
		}
		if info.SequenceID != seq || info.PreviousPacketDropped != loss || info.HasTimestamp || info.TrustedUID != 2 || info.TrustedPID != 8 {
			t.Fatalf("stamped fields %+v", info)
		}
		// What came from the state is a valid producer body: well formed,
		// no service-only field.
		body := pkt[:len(pkt)-len(wire.AppendVarint(nil, FieldSequenceFlags, uint64(info.SequenceFlags)))-len(AppendTrusted(nil, tr))]
		if err := ValidateProducerPacket(body); err != nil {
			t.Fatalf("state part: %v", err)
		}
		if len(body) > len(state) {
			t.Fatalf("%d state bytes grew to %d", len(state), len(body))
		}
	})
}

// restoreFuzzSeed renders a FuzzAppendRestorePacket corpus file.
func restoreFuzzSeed(state []byte, seq, loss uint32) []byte {
	return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\nuint32(%d)\nuint32(%d)\n", state, seq, loss)
}
