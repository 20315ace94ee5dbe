package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"sync"
	"time"
)

// Receiver limits: the defaults of ServerOptions.
const (
	DefaultHelloTimeout = 10 * time.Second
	DefaultIdleTimeout  = 5 * time.Minute
	DefaultFrameTimeout = time.Minute
	DefaultWriteTimeout = 10 * time.Second
	// DefaultFrameMemory bounds the frame buffers of all connections
	// together: sixteen frames of the largest size.
	DefaultFrameMemory = 16 * MaxFrame
	// DefaultMaxConns bounds the connections served at once.
	DefaultMaxConns = 1024
)

// maxHelloFrame bounds a hello: the fixed fields, a 255-byte hostname,
// the snapshot tail with a 255-byte trigger.
const maxHelloFrame = 4 + 2 + 8 + 16 + 1 + 255 + 16 + 4 + 1 + 255

// maxSmallFrame bounds frames the receiver reads but does not expect
// (types it will refuse, or types newer senders add): enough for a
// control message, never a batch.
const maxSmallFrame = 4 << 10

// errFrameMemory: the frame memory budget had no room for a frame before
// the frame's deadline.
var errFrameMemory = errors.New("relay: receiver frame memory budget exhausted")

// frameLimit is the largest payload the receiver reads for a frame type.
func frameLimit(typ byte) uint32 {
	switch typ {
	case frameHello:
		return maxHelloFrame
	case frameBatch:
		return MaxFrame
	case frameError:
		return maxErrorText
	}
	return maxSmallFrame
}

// memBudget bounds the bytes of frame buffers in use across connections.
// acquire waits (until a deadline) for room; it is not FIFO, so a small
// frame is not held behind a large one that waits.
type memBudget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	waiters int           // acquirers waiting for room
	changed chan struct{} // closed and replaced by a release when someone waits
	done    chan struct{} // closed by close: waiters give up
}

func newMemBudget(limit int64) *memBudget {
	return &memBudget{limit: limit, changed: make(chan struct{}), done: make(chan struct{})}
}

// acquire takes n bytes, waiting until deadline at most.
func (b *memBudget) acquire(n int64, deadline time.Time) error {
	if n > b.limit {
		return fmt.Errorf("%w: a frame of %d bytes is larger than the whole budget of %d bytes", errFrameMemory, n, b.limit)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		ch := b.changed
		b.waiters++
		b.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
		}
		var err error
		select {
		case <-ch:
		case <-timer.C:
			err = fmt.Errorf("%w: no room for %d more bytes of %d in time", errFrameMemory, n, b.limit)
		case <-b.done:
			err = fmt.Errorf("%w: receiver closing", errFrameMemory)
		}
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func (b *memBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.waiters > 0 { // nobody waits in steady state: no allocation
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// Used is the bytes in use now.
func (b *memBudget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func (b *memBudget) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.done:
	default:
		close(b.done)
	}
}

// Frame buffers are pooled by power-of-two size class (4 KiB up), the
// largest class being MaxFrame itself, so that a receiver at full speed
// reuses buffers instead of allocating one per batch.
const (
	minClassShift = 12
	numClasses    = 25 - minClassShift // 4 KiB .. 16 MiB, then MaxFrame
)

var framePools [numClasses + 1]sync.Pool

func sizeClass(n int) (class, size int) {
	if n <= 1<<minClassShift {
		return 0, 1 << minClassShift
	}
	c := bits.Len(uint(n-1)) - minClassShift
	if c >= numClasses {
		return numClasses, MaxFrame
	}
	return c, 1 << (c + minClassShift)
}

func getFrameBuf(n int) *[]byte {
	c, size := sizeClass(n)
	if p, ok := framePools[c].Get().(*[]byte); ok {
		return p
	}
	b := make([]byte, size)
	return &b
}

func putFrameBuf(p *[]byte) {
	c, size := sizeClass(cap(*p))
	if size != cap(*p) {
		return
	}
	*p = (*p)[:cap(*p)]
	framePools[c].Put(p)
}

// phase names what a connection was waiting for when a deadline passed.
type phase int

const (
	phaseHello phase = iota // TLS handshake and hello
	phaseIdle               // between frames
	phaseFrame              // inside a frame
	phaseWrite              // writing a reply
)

// budgetFrame is one frame a server connection read; release returns its
// buffer and its share of the budget.
type budgetFrame struct {
	typ     byte
	payload []byte
	buf     *[]byte
	charged int64
}

// serverReader reads a sender's frames under the server's deadlines and
// memory budget.
type serverReader struct {
	fr     *frameReader
	conn   deadliner
	budget *memBudget
	frame  time.Duration // FrameTimeout
	phase  phase         // where the last error happened
	cur    budgetFrame
	small  []byte // frames of at most maxSmallFrame bytes
	// onHeader, if set, is called when a frame's header has arrived.
	onHeader func()
}

// serverReadBuffer is the read buffer of a server connection: small, as
// payloads larger than it bypass it, and per connection it is memory the
// budget does not count.
const serverReadBuffer = 8 << 10

func newServerReader(c net.Conn, budget *memBudget, frameTimeout time.Duration) *serverReader {
	return &serverReader{fr: &frameReader{r: bufio.NewReaderSize(c, serverReadBuffer)}, conn: c, budget: budget, frame: frameTimeout}
}

type deadliner interface{ SetReadDeadline(time.Time) error }

// next reads one frame. The caller has set the read deadline for the
// frame's header (hello or idle); once the header is in, the whole
// payload, and any wait for budget, must fit in the frame timeout. The
// frame's buffer is valid until release.
func (sr *serverReader) next() (byte, []byte, error) {
	sr.release()
	fr := sr.fr
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, nil, err
	}
	typ := fr.hdr[0]
	n := binary.BigEndian.Uint32(fr.hdr[1:])
	if lim := frameLimit(typ); n > lim {
		return 0, nil, fmt.Errorf("%w: stream offset %d: frame of type %d and %d bytes exceeds the limit %d", ErrProtocol, fr.off, typ, n, lim)
	}
	sr.phase = phaseFrame
	if sr.onHeader != nil {
		sr.onHeader()
	}
	deadline := time.Now().Add(sr.frame)
	_ = sr.conn.SetReadDeadline(deadline)
	var payload []byte
	if n > 0 && n <= maxSmallFrame {
		// Small frames (hellos, errors, control) use the connection's own
		// buffer, bounded by the connection cap, so that a full budget
		// never keeps a new sender from saying hello.
		if sr.small == nil {
			sr.small = make([]byte, maxSmallFrame)
		}
		payload = sr.small[:n]
		if _, err := io.ReadFull(fr.r, payload); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, fmt.Errorf("relay: stream offset %d: frame of %d bytes: %w", fr.off, n, err)
		}
	} else if n > 0 {
		_, size := sizeClass(int(n))
		if err := sr.budget.acquire(int64(size), deadline); err != nil {
			return 0, nil, err
		}
		sr.cur = budgetFrame{charged: int64(size), buf: getFrameBuf(int(n))}
		payload = (*sr.cur.buf)[:n]
		if _, err := io.ReadFull(fr.r, payload); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, fmt.Errorf("relay: stream offset %d: frame of %d bytes: %w", fr.off, n, err)
		}
	}
	fr.off += frameHeaderSize + int64(n)
	return typ, payload, nil
}

// release gives back the last frame's buffer and budget.
func (sr *serverReader) release() {
	if sr.cur.buf != nil {
		putFrameBuf(sr.cur.buf)
		sr.budget.release(sr.cur.charged)
		sr.cur = budgetFrame{}
	}
}
