package builtin

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/plugins"
)

// FlushTimeout bounds how long a data source's Flush waits for each of its
// writer goroutines to flush its own writer and acknowledge.
const FlushTimeout = 3 * time.Second

// flushTimeout is FlushTimeout, shortened by tests.
var flushTimeout = FlushTimeout

// ErrFlushTimeout is matched (errors.Is) by the error Flush returns when a
// writer goroutine did not acknowledge in time (for example because it is
// stalled on a full SMB).
var ErrFlushTimeout = errors.New("builtin: flush not acknowledged in time")

// Stats are a running data source's counters. They are safe to read at any
// time from any goroutine.
type Stats struct {
	// Packets counts packets handed to WritePacket without error.
	Packets uint64
	// Bytes counts the bytes of those packets.
	Bytes uint64
	// WriteErrors counts WritePacket and writer Flush/Close errors (for
	// example a Stall writer's timeout); the data source keeps going.
	WriteErrors uint64
	// ReadErrors counts /proc files that could not be read or parsed, other
	// than those of processes that vanished during a scan (which is normal
	// and not counted).
	ReadErrors uint64
	// FlushTimeouts counts Flush calls that a writer goroutine did not
	// acknowledge within FlushTimeout.
	FlushTimeouts uint64
}

// counters are the atomic form of Stats. Each writer goroutine has its own
// (they are padded to keep writer goroutines off each other's cache lines).
type counters struct {
	packets       atomic.Uint64
	bytes         atomic.Uint64
	writeErrors   atomic.Uint64
	readErrors    atomic.Uint64
	flushTimeouts atomic.Uint64
	_             [24]byte
}

func (c *counters) addTo(s *Stats) {
	s.Packets += c.packets.Load()
	s.Bytes += c.bytes.Load()
	s.WriteErrors += c.writeErrors.Load()
	s.ReadErrors += c.readErrors.Load()
	s.FlushTimeouts += c.flushTimeouts.Load()
}

// write writes p to w and counts the outcome.
func (c *counters) write(w plugins.PacketWriter, p []byte) {
	if err := w.WritePacket(p); err != nil {
		c.writeErrors.Add(1)
		return
	}
	c.packets.Add(1)
	c.bytes.Add(uint64(len(p)))
}

// flush flushes w and counts a failure.
func (c *counters) flush(w plugins.PacketWriter) error {
	err := w.Flush()
	if err != nil {
		c.writeErrors.Add(1)
	}
	return err
}

// finish ends a writer when its goroutine stops: Close when the writer
// supports it (the pipeline's writers do, which releases the writer id;
// Close flushes first), else Flush.
func (c *counters) finish(w plugins.PacketWriter) error {
	if cl, ok := w.(interface{ Close() error }); ok {
		err := cl.Close()
		if err != nil {
			c.writeErrors.Add(1)
		}
		return err
	}
	return c.flush(w)
}

// flushRequest asks one writer goroutine to flush its own writer. The
// goroutine sends the result on ack, which has room for it, so a goroutine
// that answers after the requester gave up never blocks.
type flushRequest struct {
	ack chan error
}

func newFlushRequest() flushRequest { return flushRequest{ack: make(chan error, 1)} }

// awaitAcks waits for every request's ack until the shared deadline and
// joins the errors; an ack that does not come in time counts as
// ErrFlushTimeout in c.
func awaitAcks(reqs []flushRequest, deadline *time.Timer, c []*counters) error {
	var errs []error
	for i, r := range reqs {
		if r.ack == nil {
			continue // the request could not even be posted; already counted
		}
		select {
		case err := <-r.ack:
			if err != nil {
				errs = append(errs, fmt.Errorf("writer %d: %w", i, err))
			}
		case <-deadline.C:
			// Every later ack that is not already there has missed the
			// deadline too.
			for j := i; j < len(reqs); j++ {
				if reqs[j].ack == nil {
					continue
				}
				select {
				case err := <-reqs[j].ack:
					if err != nil {
						errs = append(errs, fmt.Errorf("writer %d: %w", j, err))
					}
				default:
					c[j].flushTimeouts.Add(1)
					errs = append(errs, fmt.Errorf("writer %d: %w after %v", j, ErrFlushTimeout, flushTimeout))
				}
			}
			return errors.Join(errs...)
		}
	}
	return errors.Join(errs...)
}

// bootNanos reads CLOCK_BOOTTIME in nanoseconds (a system call; the
// synthetic source's hot path uses bootClock instead).
func bootNanos() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return uint64(time.Now().UnixNano())
	}
	return uint64(ts.Nano())
}

// bootClock extrapolates CLOCK_BOOTTIME from the runtime's monotonic clock
// (read through the vDSO, unlike unix.ClockGettime, which is a system
// call), re-reading BOOTTIME every resyncEvery readings so a suspend is
// caught up with quickly. A bootClock belongs to one goroutine.
type bootClock struct {
	base  uint64
	mono  time.Time
	last  uint64
	reads uint32
}

const resyncEvery = 1 << 14

func (c *bootClock) now() uint64 {
	if c.reads == 0 {
		c.base, c.mono = bootNanos(), time.Now()
	}
	c.reads = (c.reads + 1) % resyncEvery
	// A resync can land a few nanoseconds behind the extrapolation; never
	// go back in time.
	c.last = max(c.last, c.base+uint64(time.Since(c.mono)))
	return c.last
}
