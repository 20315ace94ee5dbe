package sinks

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Link is what a network sink (relay, nats) knows about reaching its
// destination, shared so that both report outages the same way:
//
//  1. An outage starts at the first failed attempt or lost connection
//     (Down) and is logged once: "<dest>: unreachable since 12:01:03
//     (connection refused)". Later attempts in the same outage only
//     update its cause.
//  2. It ends when the destination acknowledges again (Up), logged once:
//     "<dest>: resumed after 4.1 s, nothing lost" (or how many packets
//     the outage cost). A resumed outage is an info counter
//     (Reconnects), not a loss.
//  3. The sink fails (Fail, then Failed reports it to its lane, which
//     applies on_error) when the cause is permanent (TLS, authentication,
//     no stream for the subject), when packets are lost because the
//     destination is not taking them (NoteDrops during an outage), or
//     when a destination never reached stays away longer than the
//     first-contact timeout. A failed sink keeps trying: with on_error
//     drop it may still deliver later.
//  4. Each drop at the sink's queue bound is classified by the state the
//     link was in when it happened (SetCounters): during an outage it is
//     the outage's, while the destination acknowledges a full queue's.
//
// Every method is safe for concurrent use.
type Link struct {
	dest string
	log  *slog.Logger
	now  func() time.Time

	failed     atomic.Pointer[error] // first failure; read by the lane after each item
	reconnects atomic.Uint64
	firstTime  time.Duration              // see SetFirstContactTimeout; set before use
	counters   func() (SinkStats, uint64) // see SetCounters; set before use

	mu        sync.Mutex // guards everything below
	down      bool
	everUp    bool // Up was called once
	since     time.Time
	cause     error
	lostSince uint64 // the sink's lost-packet count when the outage began
	seenP     uint64 // queue drops already classified (NoteDrops)
	seenB     uint64
	// Of those, dropped while no outage was known and not yet covered by
	// an acknowledgement (see AckedUpTo), by mark, ascending.
	pend   []pendingDrops
	movedP uint64 // of those, lost to an outage or a failure
	movedB uint64
}

// pendingDrops are queue drops classified while the sink's next batch
// was to be numbered mark (0: unknown, any acknowledgement covers them).
type pendingDrops struct{ mark, p, b uint64 }

// NewLink returns the link of a sink delivering to dest (for messages).
func NewLink(dest string, log *slog.Logger) *Link {
	return &Link{dest: dest, log: log, now: time.Now}
}

// ErrPermanent marks a cause that retrying will not cure (a TLS or
// authentication mismatch, no stream for the subject):
// a sink wraps such a cause with Permanent, and Down then fails the sink
// at once.
var ErrPermanent = errors.New("permanent")

// Permanent wraps err so that IsPermanent reports true.
func Permanent(err error) error { return permanentError{err} }

type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() []error { return []error{e.err, ErrPermanent} }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

func (l *Link) logf(level slog.Level, f string, a ...any) { Logf(l.log, level, f, a...) }

// SetCounters gives the link the sink's raw counters (its outbox's),
// which it then reads itself, under its lock, at every change of state
// (Down, Up, Acked, AckedUpTo) and in NoteDrops: every queue drop is then
// classified by the state the link was in when the drop was counted.
// Without it a drop is classified when the sink reports it (NoteDrops,
// after its Write), and on a busy machine the transport can notice the
// destination gone, or back, in between: drops of an outage would be
// classified after the reconnect that ended it, as a full queue's. With
// counters, the lost counts Down and Up are given are read from them too
// (queue plus error drops).
//
// f also returns next, the number the sink's next batch will have, read
// together with the counters (remote.Outbox.Counters): an
// acknowledgement of that batch or a later one (AckedUpTo) comes from a
// destination that took packets after those drops, which were then a
// slow destination's; an acknowledgement of an older batch proves
// nothing about them, as it may have been sent before the destination
// died and read only after the drops.
//
// f must not call the link (it runs under the link's lock). Call before
// the sink starts.
func (l *Link) SetCounters(f func() (st SinkStats, next uint64)) { l.counters = f }

// pendLocked returns the pending drops' packets and bytes.
func (l *Link) pendLocked() (p, b uint64) {
	for _, d := range l.pend {
		p += d.p
		b += d.b
	}
	return p, b
}

// movePendLocked counts every pending drop as lost to the destination.
func (l *Link) movePendLocked() {
	p, b := l.pendLocked()
	l.movedP += p
	l.movedB += b
	l.pend = l.pend[:0]
}

// coverPendLocked forgets the pending drops an acknowledgement of batch
// upTo covers: they stay counted as queue drops.
func (l *Link) coverPendLocked(upTo uint64) {
	i := 0
	for i < len(l.pend) && l.pend[i].mark <= upTo {
		i++
	}
	n := copy(l.pend, l.pend[i:])
	l.pend = l.pend[:n]
}

// syncLocked classifies the drops counted since the link last looked
// (SetCounters) by the state it is in now, before the caller changes it;
// lost is the sink's count of lost packets and ok false without counters.
// fail is what the caller must pass to Fail once it released the lock.
func (l *Link) syncLocked() (lost uint64, fail error, ok bool) {
	if l.counters == nil {
		return 0, nil, false
	}
	st, next := l.counters()
	return st.PacketsDroppedQueue + st.PacketsDroppedError, l.classifyLocked(st, next), true
}

// classifyLocked classifies the queue drops st counts beyond those seen
// so far, by the link's state now: during an outage or after a failure
// they are lost to the destination (moved), otherwise they wait (pending,
// with mark, the number of the sink's next batch) for an acknowledgement
// that covers them, which makes them a slow destination's, or for an
// outage, which makes them its. Drops during an outage fail the sink: it
// returns that failure, for the caller to record with Fail once it
// released the lock.
func (l *Link) classifyLocked(st SinkStats, mark uint64) error {
	if st.PacketsDroppedQueue <= l.seenP {
		return nil // nothing new (or an older reading than one seen)
	}
	dp, db := st.PacketsDroppedQueue-l.seenP, st.BytesDroppedQueue-l.seenB
	l.seenP, l.seenB = st.PacketsDroppedQueue, st.BytesDroppedQueue
	if !l.down && l.failed.Load() == nil {
		if n := len(l.pend); n > 0 && l.pend[n-1].mark >= mark {
			l.pend[n-1].p += dp // marks never decrease: same batch to wait for
			l.pend[n-1].b += db
		} else {
			l.pend = append(l.pend, pendingDrops{mark, dp, db})
		}
		return nil
	}
	l.movedP += dp
	l.movedB += db
	if !l.down {
		return nil // lost to the failure
	}
	return fmt.Errorf("%s unreachable (%w); packets are being dropped", l.dest, l.cause)
}

// Down records that the destination is not reachable (or not taking
// packets) because of cause; lost is the sink's count of lost packets
// now. The first Down of an outage logs it. A permanent cause fails the
// sink.
func (l *Link) Down(cause error, lost uint64) {
	l.mu.Lock()
	n, dropFail, ok := l.syncLocked() // drops before this Down: by the state before it
	if ok {
		lost = n
	}
	first := !l.down
	var pend uint64
	if first {
		// Packets dropped and not covered by an acknowledgement
		// since were lost to this outage, which the sink noticed only
		// now (a dead peer is found by a failed write or read).
		pend, _ = l.pendLocked()
		l.down, l.since, l.lostSince = true, l.now(), lost-pend
		l.movePendLocked()
	}
	l.cause = cause
	since := l.since
	l.mu.Unlock()
	if first {
		l.logf(slog.LevelWarn, "%s: unreachable since %s (%v)", l.dest, since.Format("15:04:05"), cause)
	}
	if IsPermanent(cause) {
		l.Fail(cause)
	} else if pend > 0 {
		l.Fail(fmt.Errorf("%s unreachable (%w); packets were dropped", l.dest, cause))
	} else if dropFail != nil {
		l.Fail(dropFail)
	}
}

// Acked records that the destination acknowledged something, for a
// sink that cannot tell what (no SetCounters): packets dropped before
// were lost to a destination slower than the sink's queue, not to an
// outage.
func (l *Link) Acked() { l.AckedUpTo(^uint64(0)) }

// AckedUpTo records that the destination acknowledged every batch up to
// the one numbered seq: pending drops counted while the sink's next
// batch was at most seq were lost to a destination slower than the
// sink's queue, not to an outage (see SetCounters). Later ones wait for
// a later acknowledgement or an outage.
func (l *Link) AckedUpTo(seq uint64) {
	l.mu.Lock()
	_, dropFail, _ := l.syncLocked()
	l.coverPendLocked(seq)
	l.mu.Unlock()
	if dropFail != nil { // an acknowledgement read late, after a Down
		l.Fail(dropFail)
	}
}

// Up records that the destination acknowledged again; lost is the sink's
// count of lost packets now. It ends an outage, if one was going on, and
// logs how long it lasted and what it cost.
func (l *Link) Up(lost uint64) {
	l.mu.Lock()
	// Drops counted before this Up happened during the outage, even if
	// the Write that made them has not reported them yet: they are the
	// outage's, and fail the sink.
	cur, dropFail, ok := l.syncLocked()
	if ok {
		lost = cur
	}
	wasUp := l.everUp
	l.everUp = true
	if !l.down {
		l.mu.Unlock()
		return
	}
	l.down = false // nothing is pending: drops were moved while down
	d := l.now().Sub(l.since)
	n := lost - l.lostSince
	l.cause = nil
	l.mu.Unlock()
	if dropFail != nil {
		l.Fail(dropFail)
	}
	if wasUp {
		l.reconnects.Add(1)
	}
	if n == 0 {
		l.logf(slog.LevelInfo, "%s: resumed after %.1f s, nothing lost", l.dest, d.Seconds())
	} else {
		l.logf(slog.LevelWarn, "%s: resumed after %.1f s; %d packets lost meanwhile", l.dest, d.Seconds(), n)
	}
}

// IsDown reports whether an outage is going on.
func (l *Link) IsDown() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.down
}

// Cause is the current outage's cause, nil when none is going on.
func (l *Link) Cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.down {
		return nil
	}
	return l.cause
}

// DefaultFirstContactTimeout is how long a network sink that has not yet
// reached its destination is in an outage before it fails.
const DefaultFirstContactTimeout = 10 * time.Second

// SetFirstContactTimeout sets how long an outage that began before the
// destination was ever reached may last before the sink fails (d <= 0:
// DefaultFirstContactTimeout): a destination never reached is most
// likely a wrong address or a receiver that is not running, and
// on_error: stop must not wait for the queue to fill to say so. Outages
// after a first contact fail the sink only when they cost packets. Call
// it before the sink starts.
func (l *Link) SetFirstContactTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultFirstContactTimeout
	}
	l.firstTime = d
}

// Fail marks the sink failed with err, unless it already failed; the
// packets dropped since the destination last acknowledged anything are
// lost to the failure.
func (l *Link) Fail(err error) {
	if !l.failed.CompareAndSwap(nil, &err) {
		return
	}
	l.mu.Lock()
	l.movePendLocked()
	l.mu.Unlock()
}

// Failed returns the sink's first failure, or nil (sinks.Failer). A
// first outage longer than the first-contact timeout becomes the failure
// here, when the lane next asks.
func (l *Link) Failed() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	if l.firstTime <= 0 {
		return nil
	}
	l.mu.Lock()
	expired := l.down && !l.everUp && l.now().Sub(l.since) >= l.firstTime
	since, cause := l.since, l.cause
	l.mu.Unlock()
	if !expired {
		return nil
	}
	l.Fail(fmt.Errorf("%s not reached since %s (first_contact_timeout %v): %w", l.dest, since.Format("15:04:05"), l.firstTime, cause))
	return *l.failed.Load()
}

// Reconnects counts the outages that ended after the destination had
// been reached once.
func (l *Link) Reconnects() uint64 { return l.reconnects.Load() }

// NoteDrops is called with the sink's raw counters after it may have
// dropped packets at its queue bound (after Write, and at Close): drops
// not classified yet that happened during an outage or after the sink
// failed are lost to the destination, not to a full queue (an outage
// that costs packets fails the sink); Adjust then reports them in
// PacketsDroppedError. Drops while the destination is up wait for the
// next acknowledgement (Acked: a slow destination's) or outage (Down:
// its). The check of the state and the classification are one step, so
// a Down or Up cannot fall between them. With SetCounters, st is
// ignored: the link reads the counters itself.
func (l *Link) NoteDrops(st SinkStats) {
	l.mu.Lock()
	var mark uint64
	if l.counters != nil {
		st, mark = l.counters()
	}
	dropFail := l.classifyLocked(st, mark)
	l.mu.Unlock()
	if dropFail != nil {
		l.Fail(dropFail)
	}
}

// Adjust returns the sink's raw counters as the link classifies them:
// drops NoteDrops attributed to the destination move from the queue
// counters to the error counters, a failure counts as one error, and
// ended outages as Reconnects.
func (l *Link) Adjust(st SinkStats) SinkStats {
	l.mu.Lock()
	p, b := min(l.movedP, st.PacketsDroppedQueue), min(l.movedB, st.BytesDroppedQueue)
	l.mu.Unlock()
	st.PacketsDroppedQueue -= p
	st.BytesDroppedQueue -= b
	st.PacketsDroppedError += p
	st.BytesDroppedError += b
	if l.Failed() != nil {
		st.Errors++
	}
	st.Reconnects += l.Reconnects()
	return st
}
