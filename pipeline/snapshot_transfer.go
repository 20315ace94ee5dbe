package pipeline

import (
	"time"

	"github.com/tracepipe/tracepipe/protovm"
)

// transfer_on_clone and sequence state restore.
//
// A transferred buffer goes to the snapshot unread, so the live
// session's restore fold never sees its packets: the live trace's next
// packets of each sequence would reference interned data only the moved
// packets defined. The snapshot's readback folds exactly those packets
// (into its copy of the fold, cloneForSnapshot), so when it is done the
// service adopts its per-sequence states: for each sequence with a moved
// packet, the live fold becomes the snapshot's state, with the packets
// the live fold saw since the transfer (logged, bounded) applied again,
// and the sequence's next live packet gets a restore.
//
// Until then, for at most transferHold, the live session does not read
// that buffer back (a non-final read pass skips it), so no live packet
// goes out without the state it needs; a snapshot whose sinks are stuck
// longer costs the live trace those sequences' state until their next
// CLEARED (still adopted when the snapshot ends, for what comes after).
// A second transfer of the buffer waits for the first's adoption
// (snapAdvance), so its own copy of the fold holds the first's state.

// maxTransferLog bounds the packets kept per buffer while a transfer is
// pending (overwrites in the live buffer during the snapshot's readback).
const maxTransferLog = 8 << 20

// transferHold bounds how long the live readback of a transferred buffer
// waits for the snapshot's states.
const transferHold = 10 * time.Second

// restoreTransfer is a pending transfer of a buffer with restore.
type restoreTransfer struct {
	began    time.Time
	bytes    int
	overflow bool // the log outgrew maxTransferLog: the states are not adopted
}

// beginTransfer starts logging folds; it runs when the buffer is moved.
func (r *restoreSet) beginTransfer() {
	if r != nil {
		r.transfer = &restoreTransfer{began: time.Now()}
	}
}

// transferring reports whether the live fold waits for a snapshot's
// states.
func (r *restoreSet) transferring() bool { return r != nil && r.transfer != nil }

// holdsReadback reports whether a live read pass skips the buffer: a
// transfer is pending, for less than transferHold.
func (r *restoreSet) holdsReadback() bool {
	return r.transferring() && time.Since(r.transfer.began) < transferHold
}

// logFold keeps a copy of packet, folded into q while a transfer is
// pending, to apply again on top of the moved state.
func (r *restoreSet) logFold(q *restoreSeq, packet []byte) {
	t := r.transfer
	if t.overflow {
		return
	}
	if t.bytes+len(packet) > maxTransferLog {
		t.overflow = true
		return
	}
	t.bytes += len(packet)
	q.sinceTransfer = append(q.sinceTransfer, append([]byte(nil), packet...))
}

// endTransfer adopts moved's states (the snapshot's fold after it read
// the moved buffer; nil when the snapshot never read it) and ends the
// transfer. It returns how many sequences got the moved state.
func (r *restoreSet) endTransfer(moved *restoreSet) (adopted int) {
	if r == nil || r.transfer == nil {
		return 0
	}
	t := r.transfer
	r.transfer = nil
	defer func() {
		for _, q := range r.seqs {
			q.sinceTransfer = nil
		}
	}()
	if moved == nil || t.overflow {
		return 0
	}
	for key, mq := range moved.seqs {
		if !mq.read || mq.vm == nil {
			continue // no moved packet of this sequence: the live fold is whole
		}
		q := r.seq(uint16(key>>16), uint16(key))
		if q == nil {
			continue
		}
		vm, _, err := protovm.NewWithState(mq.prog.program, mq.prog.limit, mq.vm.SerializeIncrementalState(nil))
		if err != nil {
			r.foldNewFailed++
			continue
		}
		q.vm = vm
		log := q.sinceTransfer
		q.sinceTransfer = nil // fold must not log the replay
		for _, p := range log {
			r.fold(q, p)
		}
		q.pending = true
		adopted++
	}
	return adopted
}

// transferPending reports whether a transfer of any buffer waits for its
// snapshot's states.
func (s *Service) transferPending() bool {
	for _, bs := range s.buffers {
		if bs.restore.transferring() {
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
		var moved *restoreSet
		if sn.readDone && i < len(sn.restores) {
			moved = sn.restores[i]
		}
		rs := s.buffers[i].restore
		overflow := rs.transferring() && rs.transfer.overflow
		rs.endTransfer(moved)
		if overflow {
			s.logf("snapshot %d: more than %d bytes overwritten in buffer %d while the snapshot was read; the live trace's sequences restart without the moved state", sn.n, maxTransferLog, i)
		}
	}
}
