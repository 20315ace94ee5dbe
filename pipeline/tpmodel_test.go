package pipeline

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// tpModel models, in file order, the parts of trace_processor's import
// that ring wrap breaks (trace-processor-import.md §1–§3): per-sequence
// incremental state validity (valid only after CLEARED; a loss flag
// without CLEARED invalidates), NEEDS packets skipped on an invalid
// sequence, interned event names per generation (first definition wins,
// dropped while invalid), and counter events whose counter track
// descriptor has not been seen yet. ProtoVM replacement is not modelled:
// the traces it reads carry no protovms packet.
type tpModel struct {
	seqs           map[uint32]*tpSeq
	tracks         map[uint64]bool // uuids with a track_descriptor
	counterTracks  map[uint64]bool // uuids with a counter track_descriptor
	threads        map[int64]int64 // tid → tgid from process_tree / thread descriptors
	skipped        map[uint32]int  // packet_skipped_seq_needs_incremental_state_invalid per sequence
	names          int             // name_iid lookups that resolved
	unresolved     int             // name_iid lookups that failed (interned_data_tokenizer_errors)
	counters       int             // counter events imported
	counterInvalid int             // track_event_counter_invalid_track_uuid
	slices         int             // SLICE_BEGIN events imported
	counterValues  map[uint64][]uint64
}

type tpSeq struct {
	valid bool
	names map[uint64]bool
}

func newTPModel() *tpModel {
	return &tpModel{seqs: map[uint32]*tpSeq{}, tracks: map[uint64]bool{}, counterTracks: map[uint64]bool{},
		threads: map[int64]int64{}, skipped: map[uint32]int{}, counterValues: map[uint64][]uint64{}}
}

func (m *tpModel) packet(t *testing.T, raw []byte) {
	t.Helper()
	info, err := tracefile.DecodePacket(raw)
	if err != nil {
		t.Fatal(err)
	}
	id := info.SequenceID
	q := m.seqs[id]
	if q == nil {
		q = &tpSeq{names: map[uint64]bool{}}
		m.seqs[id] = q
	}
	if info.SequenceFlags&tracefile.SeqIncrementalStateCleared != 0 {
		q.valid, q.names = true, map[uint64]bool{}
	} else if info.PreviousPacketDropped != 0 {
		q.valid = false
	}
	var trackEvent, trackDesc, processTree []byte
	testsupport.Fields(t, raw, func(num protowire.Number, _ uint64, p []byte) {
		switch num {
		case tracefile.FieldInternedData:
			if !q.valid {
				return
			}
			testsupport.Fields(t, p, func(num protowire.Number, _ uint64, e []byte) {
				if num != 2 { // event_names
					return
				}
				testsupport.Fields(t, e, func(num protowire.Number, v uint64, _ []byte) {
					if num == 1 {
						q.names[v] = true
					}
				})
			})
		case tracefile.FieldTrackEvent:
			trackEvent = p
		case tracefile.FieldTrackDescriptor:
			trackDesc = p
		case tracefile.FieldProcessTree:
			processTree = p
		}
	})
	if info.SequenceFlags&tracefile.SeqNeedsIncrementalState != 0 && !q.valid {
		m.skipped[id]++
		return
	}
	if trackDesc != nil {
		var uuid uint64
		counter := false
		testsupport.Fields(t, trackDesc, func(num protowire.Number, v uint64, _ []byte) {
			switch num {
			case 1:
				uuid = v
			case 8:
				counter = true
			}
		})
		m.tracks[uuid] = true
		if counter {
			m.counterTracks[uuid] = true
		}
	}
	if processTree != nil {
		testsupport.Fields(t, processTree, func(num protowire.Number, _ uint64, p []byte) {
			var tid, tgid int64
			switch num {
			case 1: // Process: its main thread
				testsupport.Fields(t, p, func(num protowire.Number, v uint64, _ []byte) {
					if num == 1 {
						tid, tgid = int64(v), int64(v)
					}
				})
			case 2: // Thread
				testsupport.Fields(t, p, func(num protowire.Number, v uint64, _ []byte) {
					switch num {
					case 1:
						tid = int64(v)
					case 3:
						tgid = int64(v)
					}
				})
			default:
				return
			}
			m.threads[tid] = tgid
		})
	}
	if trackEvent != nil {
		var typ, uuid, iid, value uint64
		var hasIID bool
		testsupport.Fields(t, trackEvent, func(num protowire.Number, v uint64, _ []byte) {
			switch num {
			case 9:
				typ = v
			case 10:
				iid, hasIID = v, true
			case 11:
				uuid = v
			case 30:
				value = v
			}
		})
		if typ == 4 {
			if !m.counterTracks[uuid] {
				m.counterInvalid++
				return
			}
			m.counters++
			m.counterValues[uuid] = append(m.counterValues[uuid], value)
			return
		}
		if typ == 1 {
			m.slices++
		}
		if hasIID {
			if q.names[iid] {
				m.names++
			} else {
				m.unresolved++
			}
		}
	}
}

func (m *tpModel) totalSkipped() int {
	n := 0
	for _, v := range m.skipped {
		n += v
	}
	return n
}
