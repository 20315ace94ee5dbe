package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Clock synchronisation, as Perfetto's traced_relay does it
// (trace-processor-import.md §9): one round is four clock snapshots taken
// ping-pong over the connection,
//
//	sender                          receiver
//	c1 = clocks; clock-sync PING ─▶ h1 = clocks on arrival
//	c2 = clocks on arrival      ◀─ pong
//	clock-sync UPDATE (c2)      ─▶ h2 = clocks on arrival
//
// from which trace_processor estimates each clock's offset sender −
// receiver with an error below the round trip c2 − c1. A sender runs a
// round right after the hello, before its first batch (on an idle
// connection, so the round is short), then every ClockSyncPeriod between
// batches; the receiver hands complete rounds to its Store, which writes
// them into a merged trace as remote_clock_sync packets.
//
// Negotiation: the frames exist from protocol version 3. The receiver's
// hello ack has always carried its version, and a sender sends clock-sync
// frames only to a receiver that announced 3 or more; to an older one it
// logs, once, that its merged traces will not align this machine, and
// sends batches as before. A receiver that gets no round before a
// sender's first batch logs the same about that sender.

// Clock-sync frame layouts, big endian. Part of the wire format.
//
//	frameClockSync  round:u32 phase:u8 n:u8 then n × (clock id:u8 timestamp:u64)
//	frameClockPong  round:u32
const (
	clockSyncVersion = 3 // first protocol version with clock-sync frames

	phasePing   = 1 // c1: the receiver answers with a pong
	phaseUpdate = 2 // c2: completes the round

	clockSyncHeader = 6
	clockEntrySize  = 9
)

// Defaults of Options' clock-sync fields.
const (
	// DefaultClockSyncPeriod is the time between rounds after the first,
	// as traced_relay's.
	DefaultClockSyncPeriod = 30 * time.Second
)

// ClockSyncStats counts a sender's clock-sync rounds.
type ClockSyncStats struct {
	Rounds   atomic.Uint64 // completed (update sent)
	TimedOut atomic.Uint64 // abandoned: no pong within the dial timeout
	// LastRoundTrip is the last completed round's c2 − c1 in ns.
	LastRoundTrip atomic.Int64
	oldReceiver   atomic.Bool // logged once: receiver without clock sync
}

// appendClockSync appends a clock-sync frame.
func appendClockSync(dst []byte, round uint32, phase byte, clocks []tracefile.Clock) []byte {
	dst = appendFrameHeader(dst, frameClockSync, clockSyncHeader+clockEntrySize*len(clocks))
	dst = binary.BigEndian.AppendUint32(dst, round)
	dst = append(dst, phase, byte(len(clocks)))
	for _, c := range clocks {
		dst = append(dst, byte(c.ID))
		dst = binary.BigEndian.AppendUint64(dst, c.Timestamp)
	}
	return dst
}

func appendClockPong(dst []byte, round uint32) []byte {
	dst = appendFrameHeader(dst, frameClockPong, 4)
	return binary.BigEndian.AppendUint32(dst, round)
}

// DecodeClockSync parses a clock-sync frame's payload, appending its
// clocks to dst. Every field is checked: the length against the clock
// count, the phase, the round (not 0) and the snapshot (see
// remote.ValidateClocks); errors name the offset.
func DecodeClockSync(p []byte, dst []tracefile.Clock) (round uint32, phase byte, clocks []tracefile.Clock, err error) {
	if len(p) < clockSyncHeader {
		return 0, 0, dst, fmt.Errorf("%w: clock sync of %d bytes is too short", ErrProtocol, len(p))
	}
	round, phase = binary.BigEndian.Uint32(p), p[4]
	n := int(p[5])
	if round == 0 {
		return 0, 0, dst, fmt.Errorf("%w: clock sync offset 0: round 0", ErrProtocol)
	}
	if phase != phasePing && phase != phaseUpdate {
		return 0, 0, dst, fmt.Errorf("%w: clock sync offset 4: phase %d", ErrProtocol, phase)
	}
	if n > remote.MaxSyncClocks || len(p) != clockSyncHeader+clockEntrySize*n {
		return 0, 0, dst, fmt.Errorf("%w: clock sync offset 5: %d clocks in %d bytes (at most %d clocks)", ErrProtocol, n, len(p), remote.MaxSyncClocks)
	}
	start := len(dst)
	for i := 0; i < n; i++ {
		e := p[clockSyncHeader+clockEntrySize*i:]
		dst = append(dst, tracefile.Clock{ID: uint32(e[0]), Timestamp: binary.BigEndian.Uint64(e[1:])})
	}
	if err := remote.ValidateClocks(dst[start:]); err != nil {
		return 0, 0, dst[:start], fmt.Errorf("%w: clock sync of round %d: %w", ErrProtocol, round, err)
	}
	return round, phase, dst, nil
}

// clockSyncer is the sender's side of clock sync on one connection. Only
// the connection's write loop calls run; the ack reader calls pong.
type clockSyncer struct {
	timeout time.Duration
	read    func([]tracefile.Clock) []tracefile.Clock
	stats   *ClockSyncStats
	ticker  *time.Ticker
	pongs   chan uint32   // answered rounds, from the ack reader
	round   atomic.Uint32 // last round started
	c1, c2  []tracefile.Clock
	buf     []byte
}

// newClockSyncer returns the clock syncer of a connection to a receiver
// of version ver, or nil when clock sync is off or the receiver predates
// it (logged once per sink). All its methods accept a nil receiver.
func (s *Sink) newClockSyncer(ver uint16) *clockSyncer {
	if s.opts.ClockSyncPeriod < 0 {
		return nil
	}
	if ver < clockSyncVersion {
		if !s.clock.oldReceiver.Swap(true) {
			s.logf("relay: %s: receiver speaks relay protocol %d, clock sync needs %d: a merged trace it writes cannot align this machine's clocks", s.opts.Address, ver, clockSyncVersion)
		}
		return nil
	}
	period := s.opts.ClockSyncPeriod
	if period == 0 {
		period = DefaultClockSyncPeriod
	}
	read := s.opts.clocks
	if read == nil {
		read = remote.ReadClocks
	}
	return &clockSyncer{timeout: s.opts.DialTimeout, read: read, stats: &s.clock,
		ticker: time.NewTicker(period), pongs: make(chan uint32, 4)}
}

func (cs *clockSyncer) stop() {
	if cs != nil {
		cs.ticker.Stop()
	}
}

// tick fires when a round is due (never for nil).
func (cs *clockSyncer) tick() <-chan time.Time {
	if cs == nil {
		return nil
	}
	return cs.ticker.C
}

// due reports, without blocking, whether a round is due.
func (cs *clockSyncer) due() bool {
	if cs == nil {
		return false
	}
	select {
	case <-cs.ticker.C:
		return true
	default:
		return false
	}
}

// pong handles a pong frame read by the ack reader. A pong for a round
// never started is a protocol error; one for an abandoned round is
// ignored by run.
func (cs *clockSyncer) pong(p []byte) error {
	if cs == nil {
		return fmt.Errorf("%w: clock-sync pong on a connection without clock sync", ErrProtocol)
	}
	if len(p) != 4 {
		return fmt.Errorf("%w: clock-sync pong of %d bytes, want 4", ErrProtocol, len(p))
	}
	r := binary.BigEndian.Uint32(p)
	if r == 0 || r > cs.round.Load() {
		return fmt.Errorf("%w: clock-sync pong for round %d, only %d started", ErrProtocol, r, cs.round.Load())
	}
	select {
	case cs.pongs <- r:
	default: // run is not waiting for this many: it times out or skips them
	}
	return nil
}

// run performs one round on c: ping, wait for the pong (at most the dial
// timeout; a round not answered by then is abandoned and counted, the
// next one retries), update. Only write errors and ctx end it with an
// error.
func (cs *clockSyncer) run(ctx context.Context, c net.Conn) error {
	if cs == nil {
		return nil
	}
	n := cs.round.Add(1)
	cs.c1 = cs.read(cs.c1[:0])
	if err := cs.write(c, appendClockSync(cs.buf[:0], n, phasePing, cs.c1)); err != nil {
		return fmt.Errorf("clock-sync ping: %w", err)
	}
	t := time.NewTimer(cs.timeout)
	defer t.Stop()
	for answered := false; !answered; {
		select {
		case r := <-cs.pongs:
			answered = r == n
		case <-t.C:
			cs.stats.TimedOut.Add(1)
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	cs.c2 = cs.read(cs.c2[:0])
	if err := cs.write(c, appendClockSync(cs.buf[:0], n, phaseUpdate, cs.c2)); err != nil {
		return fmt.Errorf("clock-sync update: %w", err)
	}
	c1, _ := remote.ClockValue(cs.c1, tracefile.ClockBoottime)
	c2, _ := remote.ClockValue(cs.c2, tracefile.ClockBoottime)
	cs.stats.LastRoundTrip.Store(int64(c2 - c1))
	cs.stats.Rounds.Add(1)
	return nil
}

func (cs *clockSyncer) write(c net.Conn, frame []byte) error {
	cs.buf = frame
	_ = c.SetWriteDeadline(time.Now().Add(cs.timeout))
	_, err := c.Write(frame)
	return err
}

// clockSyncReceiver is the receiver's side of clock sync on one
// connection: it pairs each ping with its update and hands the round to
// the stream.
type clockSyncReceiver struct {
	st      *remote.Stream
	log     func(level slog.Level, format string, args ...any)
	last    uint32 // last ping's round
	pending bool   // a ping waits for its update
	r       remote.ClockRound
	snaps   [4][remote.MaxSyncClocks]tracefile.Clock // backing of r's snapshots
	out     []byte
	rounds  int  // rounds completed on this connection
	warned  bool // "no clock sync" logged
	// writeTimeout bounds the write of a pong (the server's --write-timeout).
	writeTimeout time.Duration
}

func newClockSyncReceiver(st *remote.Stream, logger *slog.Logger, peer string, writeTimeout time.Duration) *clockSyncReceiver {
	return &clockSyncReceiver{st: st, writeTimeout: writeTimeout, log: func(level slog.Level, format string, args ...any) {
		sinks.Logf(logger, level, "relay: %s: "+format, append([]any{peer}, args...)...)
	}}
}

// frame handles a clock-sync frame. Errors about the peer's input wrap
// ErrProtocol.
func (cr *clockSyncReceiver) frame(c net.Conn, p []byte) error {
	host := remote.ReadClocks(cr.snaps[1][:0]) // first: the arrival time
	round, phase, clocks, err := DecodeClockSync(p, cr.snaps[0][:0])
	if err != nil {
		return err
	}
	switch phase {
	case phasePing:
		if round <= cr.last {
			return fmt.Errorf("%w: clock-sync ping of round %d after round %d", ErrProtocol, round, cr.last)
		}
		cr.last, cr.pending = round, true
		cr.r.Client1 = append(cr.snaps[2][:0], clocks...)
		cr.r.Host1 = append(cr.snaps[3][:0], host...)
		cr.out = appendClockPong(cr.out[:0], round)
		_ = c.SetWriteDeadline(time.Now().Add(cr.writeTimeout))
		_, err := c.Write(cr.out)
		_ = c.SetWriteDeadline(time.Time{})
		if err != nil {
			return fmt.Errorf("writing clock-sync pong: %w", err)
		}
		return nil
	default: // phaseUpdate
		if !cr.pending || round != cr.last {
			return fmt.Errorf("%w: clock-sync update of round %d, the open round is %d", ErrProtocol, round, cr.openRound())
		}
		cr.pending = false
		cr.r.Client2, cr.r.Host2 = clocks, host
		written, err := cr.st.ClockSync(&cr.r)
		if errors.Is(err, remote.ErrBadClockRound) {
			return fmt.Errorf("%w: clock-sync round %d: %w", ErrProtocol, round, err)
		}
		if err != nil {
			return err
		}
		cr.rounds++
		if written && cr.rounds == 1 {
			cr.log(slog.LevelInfo, "clock sync: round trip %v", cr.r.RoundTrip())
		}
		return nil
	}
}

func (cr *clockSyncReceiver) openRound() uint32 {
	if cr.pending {
		return cr.last
	}
	return 0
}

// batch notes a batch: a merged trace whose sender sent no round before
// its first batch cannot align that machine, which is logged once.
func (cr *clockSyncReceiver) batch() {
	if cr.rounds == 0 && !cr.warned && cr.st.Merged() {
		cr.warned = true
		cr.log(slog.LevelWarn, "no clock sync before the first batch (sender older than relay protocol %d, or clock sync off): trace_processor cannot align this machine's timestamps in the merged trace", clockSyncVersion)
	}
}
