package tracefile

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestValidateProducerPacket(t *testing.T) {
	field := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	good := []struct {
		name string
		pkt  []byte
	}{
		{"empty", nil},
		{"timestamp", []byte{0x40, 0x05}},
		{"nested track_event", []byte{0x5a, 0x02, 0x48, 0x01}},
		{"fixed32 and fixed64", cat(field(900, protowire.Fixed32Type), []byte{1, 2, 3, 4}, field(901, protowire.Fixed64Type), make([]byte, 8))},
		{"previous_packet_dropped from a producer", []byte{0xd0, 0x02, 0x81, 0x02}},
		{"first_packet_on_sequence", []byte{0xb8, 0x05, 0x01}},
		// Nested reserved numbers are not inspected: field 10 inside track_event.
		{"reserved number nested", []byte{0x5a, 0x02, 0x50, 0x07}},
	}
	for _, c := range good {
		if err := ValidateProducerPacket(c.pkt); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	bad := []struct {
		name, want string
		pkt        []byte
	}{
		{"trusted_uid", "offset 0: field 3 (trusted_uid) is set by the service only", []byte{0x18, 0x01}},
		{"sequence id after timestamp", "offset 2: field 10 (trusted_packet_sequence_id)", []byte{0x40, 0x05, 0x50, 0x02}},
		{"trusted_pid", "field 79 (trusted_pid)", cat(field(79, protowire.VarintType), []byte{1})},
		{"machine_id", "field 98 (machine_id)", cat(field(98, protowire.VarintType), []byte{1})},
		{"trace_stats", "field 35 (trace_stats)", cat(field(35, protowire.BytesType), []byte{0})},
		{"trace_config", "field 33", cat(field(33, protowire.BytesType), []byte{0})},
		{"sync marker", "field 36", cat(field(36, protowire.BytesType), []byte{0})},
		{"compressed", "field 50", cat(field(50, protowire.BytesType), []byte{0})},
		{"zstd compressed", "field 133", cat(field(133, protowire.BytesType), []byte{0})},
		{"service_event", "field 69", cat(field(69, protowire.BytesType), []byte{0})},
		{"provenance", "field 124", cat(field(124, protowire.BytesType), []byte{0})},
		{"protovms", "field 125", cat(field(125, protowire.BytesType), []byte{0})},
		{"group", "wire type 3", []byte{0x5b}},
		{"wire type 6", "wire type 6", []byte{0x46}},
		{"truncated bytes", "offset 0: field 11 is truncated", []byte{0x5a, 0x05, 0x01}},
		{"truncated varint", "field 8 is truncated", []byte{0x40, 0x80}},
		{"varint over 64 bits", "field 8 is truncated or malformed", []byte{0x40, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"truncated fixed64", "field 8 is truncated", []byte{0x41, 1, 2}},
		{"huge length", "is 268435456 bytes long", append([]byte{0x5a}, protowire.AppendVarint(nil, 1<<28)...)},
		{"bad tag", "offset 2: tag", []byte{0x40, 0x05, 0x80}},
		{"field 0", "offset 0: tag", []byte{0x02, 0x00}},
	}
	for _, c := range bad {
		err := ValidateProducerPacket(c.pkt)
		if err == nil || !errors.Is(err, ErrInvalidProducerPacket) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestValidateProducerPacketAllocs(t *testing.T) {
	pkt := []byte{0x40, 0x05, 0x5a, 0x02, 0x48, 0x01, 0xb8, 0x05, 0x01}
	if n := testing.AllocsPerRun(100, func() { _ = ValidateProducerPacket(pkt) }); n != 0 {
		t.Fatalf("%v allocs per valid packet", n)
	}
}

// FuzzValidateProducerPacket checks the anti-spoofing property: whatever a
// producer writes, a packet the validator accepts, once the service's
// trusted fields are appended, decodes with the service's values.
func FuzzValidateProducerPacket(f *testing.F) {
	f.Add([]byte{0x40, 0x05})
	f.Add([]byte{0x18, 0x01})
	f.Add([]byte{0x5a, 0x05, 0x01})
	f.Add([]byte{0xd0, 0x02, 0x81, 0x02, 0x5a, 0x02, 0x50, 0x07})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if ValidateProducerPacket(pkt) != nil {
			return
		}
		want := Trusted{UID: 1000, SequenceID: 7, PID: 42, HasPID: true, PreviousPacketDropped: 3}
		info, err := DecodePacket(AppendTrusted(append([]byte(nil), pkt...), want))
		if err != nil {
			t.Fatalf("accepted packet %x does not decode once stamped: %v", pkt, err)
		}
		if info.TrustedUID != want.UID || info.SequenceID != want.SequenceID || info.TrustedPID != want.PID ||
			info.PreviousPacketDropped != want.PreviousPacketDropped || info.MachineID != 0 {
			t.Fatalf("packet %x spoofs trusted fields: %+v", pkt, info)
		}
	})
}
