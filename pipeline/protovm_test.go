package pipeline

import (
	"fmt"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

// internedNames returns the event-name iids a TracePacket (or a ProtoVM
// state, which is a TracePacket) defines in interned_data.event_names.
func internedNames(t *testing.T, pkt []byte) []uint64 {
	var iids []uint64
	testsupport.Fields(t, pkt, func(num protowire.Number, _ uint64, p []byte) {
		if num != tracefile.FieldInternedData {
			return
		}
		testsupport.Fields(t, p, func(num protowire.Number, _ uint64, p []byte) {
			if num != 2 { // InternedData.event_names
				return
			}
			testsupport.Fields(t, p, func(num protowire.Number, v uint64, _ []byte) {
				if num == 1 { // EventName.iid
					iids = append(iids, v)
				}
			})
		})
	})
	return iids
}

// referencedName returns TrackEvent.name_iid (10) if the packet has one.
func referencedName(t *testing.T, pkt []byte) (iid uint64, ok bool) {
	testsupport.Fields(t, pkt, func(num protowire.Number, _ uint64, p []byte) {
		if num != tracefile.FieldTrackEvent {
			return
		}
		testsupport.Fields(t, p, func(num protowire.Number, v uint64, _ []byte) {
			if num == 10 {
				iid, ok = v, true
			}
		})
	})
	return
}

// protoVMStates returns the states of the instances of a protovms packet.
func protoVMStates(t *testing.T, pkt []byte) (states [][]byte, producers []int64) {
	testsupport.Fields(t, pkt, func(num protowire.Number, _ uint64, p []byte) {
		if num != tracefile.FieldProtoVMs {
			return
		}
		testsupport.Fields(t, p, func(num protowire.Number, _ uint64, inst []byte) {
			if num != 1 {
				return
			}
			testsupport.Fields(t, inst, func(num protowire.Number, v uint64, p []byte) {
				switch num {
				case 2:
					states = append(states, p)
				case 4:
					producers = append(producers, int64(v))
				}
			})
		})
	})
	return
}

const protoVMSession = `
buffers: [{size_kb: 64, fill_policy: ring_buffer}]
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config: {writers: 1, rate: 0, packet_size: 200, max_packets: 4000, names: 400, counter_every: 0, deterministic_timestamps: true}
%s
sinks: [{type: file, path: %q}]
`

// The ProtoVM end-to-end test of the issue, on the restore path: a tiny
// ring buffer and a data source that interns event names incrementally
// and clears its state only once, at its start. Without a program every
// surviving packet needs state that was overwritten: trace_processor
// skips them all. With the interned-names program the readback writes a
// restore packet (CLEARED, the folded names, the loss flag) ahead of the
// first survivor: nothing is skipped and every referenced name resolves.
// No protovms packet is written for a restore program.
func TestProtoVMKeepsOverwrittenInternedNames(t *testing.T) {
	program, err := filepath.Abs("../configs/protovm/interned_names.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, withVM := range []bool{false, true} {
		t.Run(fmt.Sprintf("protovm=%v", withVM), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "trace.pftrace")
			vm := ""
			if withVM {
				vm = fmt.Sprintf("    protovm: {program: %q, memory_limit_kb: 1024}", program)
			}
			res := runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(protoVMSession, vm, out)))
			if res.Stats.BufferStats[0].ChunksOverwritten == 0 {
				t.Fatal("the ring buffer did not wrap; the test proves nothing")
			}
			pkts := tracetest.ReadTrace(t, out)
			m := newTPModel()
			restores := 0
			for i, p := range pkts {
				if p.Info.PayloadField == tracefile.FieldProtoVMs {
					t.Fatal("protovms packet for a restore-path program")
				}
				if p.Info.SequenceID >= 2 && p.Info.SequenceFlags&tracefile.SeqIncrementalStateCleared != 0 && !p.Info.HasTimestamp {
					restores++
					if p.Info.PreviousPacketDropped == 0 {
						t.Errorf("restore packet %d does not carry the sequence's loss flag", i)
					}
					if i+1 >= len(pkts) || pkts[i+1].Info.SequenceID != p.Info.SequenceID || pkts[i+1].Info.PreviousPacketDropped != 0 {
						t.Errorf("packet after restore %d: %+v (want the survivor, on the same sequence, without loss flag)", i, pkts[i+1].Info)
					}
				}
				m.packet(t, p.Raw)
			}
			if !withVM {
				if restores != 0 {
					t.Fatalf("%d restore packets without a program", restores)
				}
				if m.totalSkipped() == 0 {
					t.Fatal("nothing skipped without the program: the overwrite lost nothing, the test proves nothing")
				}
				t.Logf("without program: %d packets skipped, %d names resolved", m.totalSkipped(), m.names)
				return
			}
			if m.names == 0 || m.totalSkipped() != 0 || m.unresolved != 0 {
				t.Fatalf("with the program: %d packets skipped, %d names unresolved (%d resolved)", m.totalSkipped(), m.unresolved, m.names)
			}
			tp := res.Stats.Tracepipe
			if restores != 1 || tp.SequenceRestores != 1 || tp.ProtoVMPatchesOK == 0 || tp.ProtoVMPatchesFailed != 0 {
				t.Fatalf("%d restore packets in the trace; counters %+v", restores, tp)
			}
			t.Logf("with program: 0 skipped, %d names resolved, %d restore packet", m.names, restores)
		})
	}
}

// In streaming mode a read pass that follows overwrites which changed a
// state emits provenance and the states again; one that follows none
// does not.
func TestProtoVMStatesReemittedAfterOverwrites(t *testing.T) {
	program, err := filepath.Abs("../protovm/testdata/service_program.yaml") // folds for_testing.protovm_patch: a perfetto-path program
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "trace.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
write_into_file: true
buffers: [{size_kb: 64}]
data_sources:
  - name: test.scripted
    config: {writers: 1, packets: 1}
    protovm: {program: %q, memory_limit_kb: 64, path: perfetto}
sinks: [{type: file, path: %q}]
`, program, out))
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.closeSinks()
	vms := s.buffers[0].vms
	if vms == nil || vms.Len() != 1 {
		t.Fatal("no VM set up for the data source")
	}
	// pass drains the output queue and counts protovms packets.
	pass := func() (protovms, provenance int) {
		s.readPass(false, false)
		for {
			select {
			case b := <-s.out:
				start := 0
				for _, e := range b.ends {
					info, err := tracefile.DecodePacket(b.data[start:e])
					if err != nil {
						t.Fatal(err)
					}
					switch info.PayloadField {
					case tracefile.FieldProtoVMs:
						protovms++
					case tracefile.FieldTraceProvenance:
						provenance++
					}
					start = e
				}
				b.reset()
				s.free.put(b)
			default:
				return
			}
		}
	}
	s.begin()
	if n, p := pass(); n != 1 || p != 1 {
		t.Fatalf("first pass: %d protovms, %d provenance packets; want 1 and 1", n, p)
	}
	if n, _ := pass(); n != 0 {
		t.Fatalf("pass without overwrites emitted %d protovms packets", n)
	}
	// An overwritten patch packet of producer 1 changes the state.
	var pkt []byte
	pkt = protowire.AppendTag(pkt, tracefile.FieldForTesting, protowire.BytesType)
	pkt = protowire.AppendBytes(pkt, []byte{0x32, 0x05, 0x0a, 0x01, 'x', 0x10, 0x07}) // protovm_patch {string_to_merge "x", int_to_merge 7}
	vms.Observe(1, [][]byte{pkt})
	if n, p := pass(); n != 1 || p != 1 {
		t.Fatalf("pass after a state change: %d protovms, %d provenance packets; want 1 and 1", n, p)
	}
	if n, _ := pass(); n != 0 {
		t.Fatalf("state emitted again without a change (%d)", n)
	}
}
