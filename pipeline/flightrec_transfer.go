package pipeline

import "github.com/tracepipe/tracepipe/restore"

// transfer_on_clone and sequence state restore: the session's side. The
// folds' side (logging, adoption, the hold) is restore/transfer.go.
//
// A transferred buffer goes to the snapshot unread, so the live
// session's restore fold never sees its packets: the live trace's next
// packets of each sequence would reference interned data only the moved
// packets defined. The snapshot's readback folds exactly those packets
// (into its copy of the fold, restore.Set.CloneForSnapshot), so when it is done the
// service adopts its per-sequence states: for each sequence with a moved
// packet, the live fold becomes the snapshot's state, with the packets
// the live fold saw since the transfer (logged, bounded) applied again,
// and the sequence's next live packet gets a restore.
//
// Until then, for at most restore's transferHold, the live session does not read
// that buffer back (a non-final read pass skips it), so no live packet
// goes out without the state it needs; a snapshot whose sinks are stuck
// longer costs the live trace those sequences' state until their next
// CLEARED (still adopted when the snapshot ends, for what comes after).
// A second transfer of the buffer waits for the first's adoption
// (snapAdvance), so its own copy of the fold holds the first's state.

// transferPending reports whether a transfer of any buffer waits for its
// snapshot's states.
func (s *Service) transferPending() bool {
	for _, bs := range s.buffers {
		if bs.restore.Transferring() {
			return true
		}
	}
	return false
}

// endTransfers adopts a finished (or abandoned) snapshot's moved states.
func (s *Service) endTransfers(sn *snapshot) {
	for i, m := range sn.moved {
		if m == nil || i >= len(s.buffers) {
			continue
		}
		var moved *restore.Set
		if sn.readDone && i < len(sn.restores) {
			moved = sn.restores[i]
		}
		rs := s.buffers[i].restore
		overflow := rs.TransferOverflowed()
		rs.EndTransfer(moved)
		if overflow {
			s.logf("snapshot %d: more than %d bytes overwritten in buffer %d while the snapshot was read; the live trace's sequences restart without the moved state", sn.n, restore.MaxTransferLog, i)
		}
	}
}
