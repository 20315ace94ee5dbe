package sinks

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// mkPacket builds a stamped TracePacket: timestamp, a payload field of kind
// field with n filler bytes, trusted fields for sequence seq.
func mkPacket(seq uint32, ts uint64, field int, n int) []byte {
	p := tracefile.AppendTimestamp(nil, ts)
	p = appendLenField(p, field, bytes.Repeat([]byte{0x08}, n)) // repeated "field 1 = 8"... filler
	return tracefile.AppendTrusted(p, tracefile.Trusted{UID: 1000, SequenceID: seq, PID: 42, HasPID: true})
}

func appendLenField(b []byte, num int, payload []byte) []byte {
	tag := uint64(num)<<3 | 2
	for tag >= 0x80 {
		b = append(b, byte(tag)|0x80)
		tag >>= 7
	}
	b = append(b, byte(tag))
	n := uint64(len(payload))
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	b = append(b, byte(n))
	return append(b, payload...)
}

// readTrace reads a file with the tracefile reader and returns its packets
// and the terminating error (nil for a clean end).
func readTrace(t *testing.T, name string) ([][]byte, error) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := tracefile.NewReader(f)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var out [][]byte
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, bytes.Clone(rec.Packet))
	}
}

func mustRead(t *testing.T, name string) [][]byte {
	t.Helper()
	pkts, err := readTrace(t, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return pkts
}

func samePackets(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("packet %d differs", i)
		}
	}
}

// memSink records what reaches it. When block is non-nil, Write signals
// entered and then waits for block to be closed (or ctx to end).
type memSink struct {
	mu      sync.Mutex
	pkts    [][]byte
	stats   SinkStats
	flushes int
	closed  bool
	block   chan struct{}
	entered chan struct{}
}

func (m *memSink) Write(ctx context.Context, packets [][]byte) error {
	if m.block != nil {
		select {
		case m.entered <- struct{}{}:
		default:
		}
		select {
		case <-m.block:
		case <-ctx.Done():
			m.mu.Lock()
			m.stats.PacketsDroppedError += uint64(len(packets))
			m.stats.BytesDroppedError += countBytes(packets)
			m.mu.Unlock()
			return ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	for _, p := range packets {
		m.pkts = append(m.pkts, bytes.Clone(p))
		m.stats.PacketsWritten++
		m.stats.BytesWritten += uint64(len(p))
	}
	return nil
}

func (m *memSink) Flush(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushes++
	return nil
}

func (m *memSink) Close(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("memSink closed twice")
	}
	m.closed = true
	return nil
}

func (m *memSink) Stats() SinkStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

func (m *memSink) packets() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.pkts...)
}
