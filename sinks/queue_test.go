package sinks

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/tracefile"
)

func blockedSink() *memSink {
	return &memSink{block: make(chan struct{}), entered: make(chan struct{}, 1)}
}

// TestQueueDropsWhenFull: with the wrapped sink blocked inside its first
// Write, capacity batches are held and every further batch is dropped and
// counted; nothing blocks the caller.
func TestQueueDropsWhenFull(t *testing.T) {
	inner := blockedSink()
	q := Queued(inner, 3)
	p := mkPacket(2, 1, tracefile.FieldTrackEvent, 10)
	batch := [][]byte{p, p}
	if err := q.Write(bg, batch); err != nil {
		t.Fatal(err)
	}
	<-inner.entered // batch 1 is now inside the blocked Write
	for i := 0; i < 2; i++ {
		if err := q.Write(bg, batch); err != nil {
			t.Fatalf("batch %d: %v", i+2, err)
		}
	}
	for i := 0; i < 5; i++ {
		if err := q.Write(bg, batch); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("overflow batch %d: %v", i, err)
		}
	}
	st := q.Stats()
	if st.PacketsDroppedQueue != 10 || st.BytesDroppedQueue != 10*uint64(len(p)) || st.PacketsWritten != 0 {
		t.Fatalf("stats while blocked %+v", st)
	}
	close(inner.block)
	if err := q.Close(bg); err != nil {
		t.Fatal(err)
	}
	if got := len(inner.packets()); got != 6 {
		t.Fatalf("inner got %d packets, want 6", got)
	}
	st = q.Stats()
	if st.PacketsWritten != 6 || st.PacketsDroppedQueue != 10 || st.PacketsWritten+st.PacketsDropped() != 16 {
		t.Fatalf("final stats %+v", st)
	}
	if !inner.closed {
		t.Fatal("inner not closed")
	}
	if err := q.Write(bg, batch); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestQueueCopiesPackets: the caller may reuse its buffers after Write.
func TestQueueCopiesPackets(t *testing.T) {
	inner := &memSink{}
	q := Queued(inner, 4)
	buf := []byte{1, 2, 3}
	q.Write(bg, [][]byte{buf})
	buf[0] = 9
	q.Write(bg, [][]byte{buf})
	if err := q.Flush(bg); err != nil {
		t.Fatal(err)
	}
	got := inner.packets()
	if len(got) != 2 || got[0][0] != 1 || got[1][0] != 9 || inner.flushes != 1 {
		t.Fatalf("got %v, flushes %d", got, inner.flushes)
	}
	q.Close(bg)
}

// TestQueueCloseTimeout: Close gives up when ctx ends, counts what is
// still queued as dropped, and the sink is closed once it unblocks.
func TestQueueCloseTimeout(t *testing.T) {
	inner := blockedSink()
	q := Queued(inner, 4)
	p := mkPacket(2, 1, tracefile.FieldTrackEvent, 10)
	q.Write(bg, [][]byte{p})
	<-inner.entered
	q.Write(bg, [][]byte{p, p})
	q.Write(bg, [][]byte{p})
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := q.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	<-q.done // the worker saw the cancellation, dropped the rest and closed
	st := q.Stats()
	// The blocked Write returned on ctx cancellation (counted by memSink as
	// an error drop); the three queued packets are queue drops.
	if st.PacketsDroppedQueue != 3 || st.PacketsDroppedError != 1 || st.PacketsWritten != 0 {
		t.Fatalf("stats %+v", st)
	}
	if !inner.closed {
		t.Fatal("inner not closed after abandon")
	}
	if err := q.Close(bg); err == nil {
		t.Fatal("second Close forgot the first result")
	}
}

func TestQueueFlushWaitsForEarlierBatches(t *testing.T) {
	inner := blockedSink()
	q := Queued(inner, 2)
	q.Write(bg, [][]byte{{1}})
	<-inner.entered
	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	if err := q.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush behind a blocked write: %v", err)
	}
	close(inner.block)
	if err := q.Flush(bg); err != nil {
		t.Fatal(err)
	}
	if len(inner.packets()) != 1 {
		t.Fatal("flush returned before the earlier batch was written")
	}
	q.Close(bg)
}

func TestQueueWriteAllocs(t *testing.T) {
	q := Queued(discardSink{}, 8)
	defer q.Close(bg)
	batch := [][]byte{mkPacket(2, 1, tracefile.FieldTrackEvent, 1000), mkPacket(2, 2, tracefile.FieldTrackEvent, 10)}
	for i := 0; i < 100; i++ {
		q.Write(bg, batch)
	}
	q.Flush(bg)
	if n := testing.AllocsPerRun(100, func() { q.Write(bg, batch) }); n != 0 {
		t.Fatalf("queued Write allocates %.1f times", n)
	}
}

// discardSink accepts everything and allocates nothing.
type discardSink struct{}

func (discardSink) Write(context.Context, [][]byte) error { return nil }
func (discardSink) Flush(context.Context) error           { return nil }
func (discardSink) Close(context.Context) error           { return nil }
func (discardSink) Stats() SinkStats                      { return SinkStats{} }
