package natsink

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// ReaderOptions configure a Reader.
type ReaderOptions struct {
	URL, Subject string
	// Durable names the consumer; a Reader started again with the same
	// name resumes after the last message it acknowledged. Default:
	// "tracepipe-serve".
	Durable string
	Store   *remote.Store
	Logger  *slog.Logger
}

// Reader writes the batches of a subject into a Store.
type Reader struct {
	opts    ReaderOptions
	Batches atomic.Uint64 // messages stored (duplicates included)
	Bad     atomic.Uint64 // messages skipped as malformed
	Refused atomic.Uint64 // messages skipped because a Store limit refused them
}

// NewReader returns a Reader; Run does the work.
func NewReader(opts ReaderOptions) *Reader {
	if opts.Durable == "" {
		opts.Durable = "tracepipe-serve"
	}
	return &Reader{opts: opts}
}

func (r *Reader) logf(format string, args ...any) {
	sinks.Logf(r.opts.Logger, slog.LevelWarn, format, args...)
}

func (r *Reader) infof(format string, args ...any) {
	sinks.Logf(r.opts.Logger, slog.LevelInfo, format, args...)
}

// Run consumes until ctx is done, reconnecting as needed. It returns an
// error only when it cannot start (no stream on the subject, bad URL).
func (r *Reader) Run(ctx context.Context) error {
	nc, err := nats.Connect(r.opts.URL, nats.Name("tracepipe serve"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return fmt.Errorf("natsink: %s: %w", r.opts.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var cons jetstream.Consumer
	for {
		cons, err = r.consumer(ctx, js)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("natsink: no stream listens on subject %q (start a nats sink with create_stream: true, or create one)", r.opts.Subject)
		}
		r.logf("natsink: consumer %s: %v; retrying", r.opts.Durable, err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(8 << 20))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	ro := newReorder(r)
	defer ro.release()
	lastExpire := time.Now()
	for {
		if now := time.Now(); now.Sub(lastExpire) >= time.Second {
			lastExpire = now
			if err := ro.expire(now); err != nil {
				return err
			}
		}
		msg, err := it.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			if !errors.Is(err, nats.ErrTimeout) {
				r.logf("natsink: %s: %v", r.opts.Subject, err)
			}
			if err := ro.expire(time.Now()); err != nil {
				return err
			}
			continue
		}
		if err := ro.add(msg, time.Now()); err != nil {
			if errors.Is(err, errBadMessage) {
				r.Bad.Add(1)
				r.logf("natsink: %s: skipping message: %v", r.opts.Subject, err)
				_ = msg.Ack()
				continue
			}
			// A store error (disk): leave the message unacknowledged so
			// that it is redelivered, and stop.
			return err
		}
	}
}

// Reordering. A stream may hold a session's batches out of order: after a
// reconnect the client's buffered publishes can land before the batches
// the sink publishes again. The reader holds a batch that arrives early
// (unacknowledged, so at most the consumer's MaxAckPending of them) until
// the ones before it arrive; after holdTimeout, or when maxHeld batches
// wait, it writes what it holds and the missing batches count as a gap.
const (
	maxAckPending = 64
	maxHeld       = 48
	holdTimeout   = 5 * time.Second
)

type heldMsg struct {
	msg     jetstream.Msg
	packets int
	nbytes  uint64
}

type streamHold struct {
	id    remote.Identity
	st    *remote.Stream
	held  map[uint64]heldMsg
	since time.Time // when the oldest held batch arrived
	last  time.Time // when the last batch arrived
	start time.Time
	// What this reader stored of the session, for its end line.
	batches, packets, dups, refused uint64
}

// idleRelease: a session silent this long has its file closed (it is
// reopened, from its state file, if the session sends again).
const idleRelease = time.Minute

type reorder struct {
	r       *Reader
	streams map[remote.Identity]*streamHold
	nheld   int
}

func newReorder(r *Reader) *reorder {
	return &reorder{r: r, streams: map[remote.Identity]*streamHold{}}
}

func (ro *reorder) release() {
	for _, sh := range ro.streams {
		ro.end(sh, "reader stopped")
	}
}

// end releases a session's stream and logs what was stored of it.
func (ro *reorder) end(sh *streamHold, why string) {
	last := sh.st.LastSeq()
	sh.st.Release()
	ro.r.infof("natsink: %s: session %s of %s (machine %016x) ended after %s (%s): %d batches, %d packets stored, %d duplicates, %d refused, last batch %d",
		ro.r.opts.Subject, sh.id.SessionString(), sh.id.Hostname, sh.id.Machine, time.Since(sh.start).Round(time.Millisecond), why, sh.batches, sh.packets, sh.dups, sh.refused, last)
}

// add stores msg, or holds it until the batches before it arrived.
func (ro *reorder) add(msg jetstream.Msg, now time.Time) error {
	id, seq, err := ParseHeaders(msg.Headers())
	if err != nil {
		return err
	}
	data := msg.Data()
	packets, nbytes, err := remote.CheckRecords(data)
	if err != nil {
		return fmt.Errorf("%w: batch %d of session %s: %w", errBadMessage, seq, id.SessionString(), err)
	}
	sh := ro.streams[id]
	if sh == nil {
		st, err := ro.r.opts.Store.Stream(id)
		if errors.Is(err, remote.ErrRefused) {
			ro.r.Refused.Add(1)
			_ = msg.Ack() // a limit, not a fault of the message: redelivering it would not help
			return nil
		}
		if err != nil {
			return err
		}
		sh = &streamHold{id: id, st: st, held: map[uint64]heldMsg{}, start: now}
		ro.streams[id] = sh
		ro.r.infof("natsink: %s: session %s of %s (machine %016x) started (stored up to batch %d)", ro.r.opts.Subject, id.SessionString(), id.Hostname, id.Machine, st.LastSeq())
	}
	sh.last = now
	if err := sh.st.CheckWindow(seq); err != nil {
		// Held, a batch numbered 2^64-1 would wait for batches that
		// never come and then end the session's numbering.
		sh.refused++
		ro.r.Refused.Add(1)
		_ = msg.Ack()
		return nil
	}
	last := sh.st.LastSeq()
	switch {
	case seq <= last+1:
		if err := ro.store(sh, seq, heldMsg{msg, packets, nbytes}); err != nil {
			return err
		}
		return ro.drain(sh)
	case sh.held[seq].msg != nil:
		ro.r.Batches.Add(1)
		_ = msg.Ack() // the same batch twice in the stream
		return nil
	}
	if len(sh.held) == 0 {
		sh.since = now
	}
	sh.held[seq] = heldMsg{msg, packets, nbytes}
	ro.nheld++
	if ro.nheld >= maxHeld {
		return ro.giveUp(sh)
	}
	return nil
}

func (ro *reorder) store(sh *streamHold, seq uint64, m heldMsg) error {
	stored, err := sh.st.Append(seq, m.msg.Data(), m.packets, m.nbytes)
	if errors.Is(err, remote.ErrRefused) {
		// Counted (and logged once) by the store; the message is
		// acknowledged so that it does not come back.
		sh.refused++
		ro.r.Refused.Add(1)
		_ = m.msg.Ack()
		return nil
	}
	if err != nil {
		return err
	}
	if stored {
		sh.batches++
		sh.packets += uint64(m.packets)
	} else {
		sh.dups++
	}
	ro.r.Batches.Add(1)
	_ = m.msg.Ack()
	return nil
}

// drain stores held batches that now follow the last one stored.
func (ro *reorder) drain(sh *streamHold) error {
	for {
		next := sh.st.LastSeq() + 1
		m, ok := sh.held[next]
		if !ok {
			if len(sh.held) > 0 {
				sh.since = time.Now()
			}
			return nil
		}
		delete(sh.held, next)
		ro.nheld--
		if err := ro.store(sh, next, m); err != nil {
			return err
		}
	}
}

// giveUp stores everything sh holds, in order, accepting the gaps.
func (ro *reorder) giveUp(sh *streamHold) error {
	seqs := make([]uint64, 0, len(sh.held))
	for s := range sh.held {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	ro.r.logf("natsink: %s: batches missing before %d; writing %d later batches with a gap", ro.r.opts.Subject, seqs[0], len(seqs))
	for _, s := range seqs {
		m := sh.held[s]
		delete(sh.held, s)
		ro.nheld--
		if err := ro.store(sh, s, m); err != nil {
			return err
		}
	}
	return nil
}

// expire gives up on gaps older than holdTimeout and releases sessions
// idle for idleRelease.
func (ro *reorder) expire(now time.Time) error {
	for id, sh := range ro.streams {
		if len(sh.held) > 0 && now.Sub(sh.since) >= holdTimeout {
			if err := ro.giveUp(sh); err != nil {
				return err
			}
		}
		if len(sh.held) == 0 && now.Sub(sh.last) >= idleRelease {
			ro.end(sh, fmt.Sprintf("no batch for %s", idleRelease))
			delete(ro.streams, id)
		}
	}
	return nil
}

func (r *Reader) consumer(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := js.StreamNameBySubject(ctx, r.opts.Subject)
	if err != nil {
		return nil, err
	}
	return js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       r.opts.Durable,
		FilterSubject: r.opts.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: maxAckPending,
	})
}

var errBadMessage = errors.New("malformed message")

// ParseHeaders reads a batch message's identity and number.
func ParseHeaders(h nats.Header) (remote.Identity, uint64, error) {
	var id remote.Identity
	get := func(k string) (string, error) {
		v := h.Values(k)
		if len(v) != 1 {
			return "", fmt.Errorf("%w: header %s: %d values, want 1", errBadMessage, k, len(v))
		}
		return v[0], nil
	}
	m, err := get(HeaderMachine)
	if err != nil {
		return id, 0, err
	}
	if id.Machine, err = strconv.ParseUint(m, 16, 64); err != nil || len(m) != 16 || id.Machine == 0 {
		return id, 0, fmt.Errorf("%w: header %s: %q is not 16 hex digits", errBadMessage, HeaderMachine, m)
	}
	sess, err := get(HeaderSession)
	if err != nil {
		return id, 0, err
	}
	if len(sess) != 32 {
		return id, 0, fmt.Errorf("%w: header %s: %q is not 32 hex digits", errBadMessage, HeaderSession, sess)
	}
	if _, err := hex.Decode(id.Session[:], []byte(sess)); err != nil {
		return id, 0, fmt.Errorf("%w: header %s: %q is not 32 hex digits", errBadMessage, HeaderSession, sess)
	}
	if id.Hostname, err = get(HeaderHost); err != nil {
		return id, 0, err
	}
	if len(id.Hostname) > 255 {
		return id, 0, fmt.Errorf("%w: header %s: %d bytes, at most 255", errBadMessage, HeaderHost, len(id.Hostname))
	}
	s, err := get(HeaderSeq)
	if err != nil {
		return id, 0, err
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return id, 0, fmt.Errorf("%w: header %s: %q is not a batch number", errBadMessage, HeaderSeq, s)
	}
	if id.Snapshot, err = parseSnapshotHeaders(h, get); err != nil {
		return id, 0, err
	}
	return id, seq, nil
}

// parseSnapshotHeaders reads a snapshot's headers: all three or none.
func parseSnapshotHeaders(h nats.Header, get func(string) (string, error)) (sinks.Snapshot, error) {
	var snap sinks.Snapshot
	present := 0
	for _, k := range []string{HeaderSnapshotOf, HeaderSnapshot, HeaderTrigger} {
		if len(h.Values(k)) > 0 {
			present++
		}
	}
	switch present {
	case 0:
		return snap, nil
	case 3:
	default:
		return snap, fmt.Errorf("%w: headers %s, %s and %s come together; %d of them present", errBadMessage, HeaderSnapshotOf, HeaderSnapshot, HeaderTrigger, present)
	}
	of, err := get(HeaderSnapshotOf)
	if err != nil {
		return snap, err
	}
	if len(of) != 32 {
		return snap, fmt.Errorf("%w: header %s: %q is not 32 hex digits", errBadMessage, HeaderSnapshotOf, of)
	}
	if _, err := hex.Decode(snap.Of[:], []byte(of)); err != nil {
		return snap, fmt.Errorf("%w: header %s: %q is not 32 hex digits", errBadMessage, HeaderSnapshotOf, of)
	}
	n, err := get(HeaderSnapshot)
	if err != nil {
		return snap, err
	}
	v, err := strconv.ParseUint(n, 10, 32)
	if err != nil || v == 0 {
		return snap, fmt.Errorf("%w: header %s: %q is not a snapshot number", errBadMessage, HeaderSnapshot, n)
	}
	snap.N = uint32(v)
	if snap.Trigger, err = get(HeaderTrigger); err != nil {
		return snap, err
	}
	if len(snap.Trigger) > sinks.MaxSnapshotTrigger || !utf8.ValidString(snap.Trigger) {
		return snap, fmt.Errorf("%w: header %s: not UTF-8 of at most %d bytes", errBadMessage, HeaderTrigger, sinks.MaxSnapshotTrigger)
	}
	return snap, nil
}
