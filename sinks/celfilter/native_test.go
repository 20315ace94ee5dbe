package celfilter

import (
	"math/rand/v2"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Every lowered filter agrees with CEL on random packets.
func TestNativeFilterMatchesCEL(t *testing.T) {
	lowered := []string{
		`packet.kind == "track_event" && packet.sequence_id != 3`,
		`packet.kind != "sys_stats" || packet.size > 100`,
		`!(packet.trusted_pid == 42) && packet.timestamp >= 5`,
		`3 < packet.sequence_id`,
		`packet.size <= 64 || packet.size > 1000 && packet.has_timestamp`,
		`packet.has_timestamp == false || packet.first_packet_on_sequence != true`,
		`packet.previous_packet_dropped > 0 || packet.machine_id == 2 || packet.sequence_flags == 1`,
		`packet.timestamp_clock_id == 6 && packet.trusted_uid != 1000`,
		`true && !packet.first_packet_on_sequence`,
		`packet.timestamp < -1`,
	}
	notLowered := []string{
		`packet.kind.startsWith("track")`,
		`packet.size > 100u`,
		`packet.size + 1 > 100`,
		`packet.kind < "m"`,
		`packet.size > 10.5`,
		`packet.kind in ["track_event", "sys_stats"]`,
	}
	for _, e := range notLowered {
		f, err := compile(e)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if f.native != nil {
			t.Errorf("%s was lowered; it is outside the native subset", e)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := []int{tracefile.FieldTrackEvent, 45, 19, 3000}
	for _, e := range lowered {
		f, err := compile(e)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		if f.native == nil {
			t.Fatalf("%s was not lowered", e)
		}
		cel := &program{expr: f.expr, prg: f.prg}
		for i := 0; i < 2000; i++ {
			info := tracefile.PacketInfo{
				Size: rng.IntN(2000), Timestamp: rng.Uint64N(20) - 2, HasTimestamp: rng.IntN(2) == 0,
				TimestampClockID: uint32(rng.IntN(8)), SequenceID: uint32(2 + rng.IntN(5)),
				TrustedUID: int32(999 + rng.IntN(3)), TrustedPID: int32(40 + rng.IntN(4)),
				MachineID: uint32(rng.IntN(3)), PreviousPacketDropped: uint32(rng.IntN(2)),
				SequenceFlags: uint32(rng.IntN(3)), FirstPacketOnSequence: rng.IntN(2) == 0,
				PayloadField: int32(kinds[rng.IntN(len(kinds))]),
			}
			want, err := cel.eval(info)
			if err != nil {
				t.Fatalf("%s: CEL: %v", e, err)
			}
			if got, _ := f.eval(info); got != want {
				t.Fatalf("%s on %+v: native %v, CEL %v", e, info, got, want)
			}
		}
	}
}
