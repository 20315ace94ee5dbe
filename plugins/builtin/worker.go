package builtin

import (
	"errors"
	"fmt"
	"time"

	"github.com/tracepipe/tracepipe/plugins"
)

// worker is the one goroutine of a /proc source with its one writer: it
// does the source's work on request (incremental-state clears) and on a
// period, and answers flushes itself, so the writer is only ever used by
// this goroutine.
type worker struct {
	name string // data source name, for errors

	clear   chan struct{}     // capacity 1: clears coalesce
	flushes chan flushRequest // pending flush requests
	stop    chan struct{}     // closed by Stop
	done    chan struct{}     // closed when the goroutine exits

	// Used only by the goroutine (finishErr read after done is closed).
	w         plugins.PacketWriter
	finishErr error

	c counters
}

// workerBody is what the goroutine runs: start once, then tick on every
// period (if period > 0) and clear on every ClearIncrementalState.
type workerBody struct {
	start  func()
	tick   func()
	clear  func()
	period time.Duration
}

func newWorker(name string) *worker {
	return &worker{
		name:    name,
		clear:   make(chan struct{}, 1),
		flushes: make(chan flushRequest, 8),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// begin opens the writer and starts the goroutine.
func (k *worker) begin(h plugins.Host, body workerBody) error {
	w, err := h.NewWriter()
	if err != nil {
		return fmt.Errorf("%s: %w", k.name, err)
	}
	k.w = w
	go k.run(body)
	return nil
}

func (k *worker) run(body workerBody) {
	defer close(k.done)
	var tick <-chan time.Time
	if body.period > 0 {
		t := time.NewTicker(body.period)
		defer t.Stop()
		tick = t.C
	}
	if body.start != nil {
		body.start()
	}
	for {
		select {
		case <-k.stop:
			k.finishErr = k.c.finish(k.w)
			k.answerFlushes(k.finishErr)
			return
		case r := <-k.flushes:
			r.ack <- k.c.flush(k.w)
		case <-k.clear:
			if body.clear != nil {
				body.clear()
			}
		case <-tick:
			if body.tick != nil {
				body.tick()
			}
		}
	}
}

func (k *worker) answerFlushes(err error) {
	for {
		select {
		case r := <-k.flushes:
			r.ack <- err
		default:
			return
		}
	}
}

// postClear asks for a clear without waiting; a clear already pending
// covers this one.
func (k *worker) postClear() {
	select {
	case k.clear <- struct{}{}:
	default:
	}
}

// flush asks the goroutine to flush its writer and waits for the ack, at
// most FlushTimeout.
func (k *worker) flush() error {
	r := newFlushRequest()
	select {
	case k.flushes <- r:
	default:
		k.c.flushTimeouts.Add(1)
		return fmt.Errorf("%s: flush: %w (earlier flushes still pending)", k.name, ErrFlushTimeout)
	}
	t := time.NewTimer(flushTimeout)
	defer t.Stop()
	select {
	case err := <-r.ack:
		if err != nil {
			return fmt.Errorf("%s: flush: %w", k.name, err)
		}
		return nil
	case <-t.C:
		k.c.flushTimeouts.Add(1)
		return fmt.Errorf("%s: flush: %w after %v", k.name, ErrFlushTimeout, flushTimeout)
	}
}

// end stops the goroutine and waits until it has finished its writer.
func (k *worker) end() error {
	close(k.stop)
	<-k.done
	if k.finishErr != nil {
		return fmt.Errorf("%s: stop: %w", k.name, k.finishErr)
	}
	return nil
}

var errAlreadyStarted = errors.New("already started")
