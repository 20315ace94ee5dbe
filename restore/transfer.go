package restore

import (
	"time"

	"github.com/tracepipe/tracepipe/protovm"
)

// transfer_on_clone and sequence state restore: the folds' side.
//
// A transferred buffer goes to the snapshot unread, so the live
// session's restore fold never sees its packets: the live trace's next
// packets of each sequence would reference interned data only the moved
// packets defined. The snapshot's readback folds exactly those packets
// (into its copy of the fold, CloneForSnapshot), so when it is done the
// session adopts its per-sequence states (EndTransfer): for each sequence
// with a moved packet, the live fold becomes the snapshot's state, with
// the packets the live fold saw since the transfer (logged, bounded)
// applied again, and the sequence's next live packet gets a restore.
//
// Until then, for at most transferHold, the live session does not read
// that buffer back (HoldsReadback), so no live packet goes out without
// the state it needs. The session's side is pipeline/flightrec_transfer.go.

// MaxTransferLog bounds the packets kept per buffer while a transfer is
// pending (overwrites in the live buffer during the snapshot's readback).
const MaxTransferLog = 8 << 20

// transferHold bounds how long the live readback of a transferred buffer
// waits for the snapshot's states.
const transferHold = 10 * time.Second

// transfer is a pending transfer of a buffer with restore.
type transfer struct {
	began    time.Time
	bytes    int
	overflow bool // the log outgrew MaxTransferLog: the states are not adopted
}

// BeginTransfer starts logging folds; the session core calls it when it
// moves the buffer (transfer_on_clone) to a snapshot. No-op on nil.
func (r *Set) BeginTransfer() {
	if r != nil {
		r.transfer = &transfer{began: time.Now()}
	}
}

// Transferring reports whether the live fold waits for a snapshot's
// states. False on nil.
func (r *Set) Transferring() bool { return r != nil && r.transfer != nil }

// HoldsReadback reports whether a live read pass skips the buffer: a
// transfer is pending, for less than transferHold. False on nil.
func (r *Set) HoldsReadback() bool {
	return r.Transferring() && time.Since(r.transfer.began) < transferHold
}

// logFold keeps a copy of packet, folded into q while a transfer is
// pending, to apply again on top of the moved state.
func (r *Set) logFold(q *Seq, packet []byte) {
	t := r.transfer
	if t.overflow {
		return
	}
	if t.bytes+len(packet) > MaxTransferLog {
		t.overflow = true
		return
	}
	t.bytes += len(packet)
	q.sinceTransfer = append(q.sinceTransfer, append([]byte(nil), packet...))
}

// TransferOverflowed reports whether the pending transfer's log outgrew
// MaxTransferLog, so that EndTransfer will not adopt the moved states.
func (r *Set) TransferOverflowed() bool { return r.Transferring() && r.transfer.overflow }

// EndTransfer adopts moved's states (the snapshot's fold after it read
// the moved buffer; nil when the snapshot never read it) and ends the
// transfer. It returns how many sequences got the moved state.
func (r *Set) EndTransfer(moved *Set) (adopted int) {
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
		q := r.Seq(uint16(key>>16), uint16(key))
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

// CloneForSnapshot copies the restore set for a snapshot's readback:
// each sequence's fold becomes a VM of its own holding the state as of
// now (the live one keeps folding), so a snapshot's restores describe
// exactly what its window lost. nil for a buffer without restore.
func (r *Set) CloneForSnapshot() *Set {
	if r == nil {
		return nil
	}
	c := NewSet()
	for k, v := range r.programs {
		c.programs[k] = v
	}
	for k, q := range r.seqs {
		cq := &Seq{prog: q.prog, pending: q.pending}
		if q.vm != nil {
			vm, _, err := protovm.NewWithState(q.prog.program, q.prog.limit, q.vm.SerializeIncrementalState(nil))
			if err == nil {
				cq.vm = vm
			} else {
				c.foldNewFailed++
			}
		}
		c.seqs[k] = cq
	}
	return c
}
