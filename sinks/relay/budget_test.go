package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// The budget lets a waiter in when room is released, refuses one whose
// deadline passes, refuses a frame larger than itself at once, and costs
// no allocation when nobody waits.
func TestMemBudget(t *testing.T) {
	b := newMemBudget(100)
	if err := b.acquire(101, time.Now().Add(time.Hour)); !errors.Is(err, errFrameMemory) {
		t.Fatalf("a frame over the whole budget: %v", err)
	}
	if err := b.acquire(80, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := b.acquire(30, time.Now().Add(20*time.Millisecond)); !errors.Is(err, errFrameMemory) {
		t.Fatalf("no room before the deadline: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- b.acquire(30, time.Now().Add(time.Hour)) }()
	waiting := func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.waiters == 1
	}
	if !testsupport.WaitFor(10*time.Second, waiting) {
		t.Fatal("the second acquire never waited for frame memory")
	}
	b.release(80)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not let in after the release")
	}
	if b.Used() != 30 {
		t.Fatalf("used %d, want 30", b.Used())
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = b.acquire(10, time.Time{})
		b.release(10)
	}); n != 0 {
		t.Fatalf("acquire+release allocates %v times with nobody waiting", n)
	}
	b.close()
	if err := b.acquire(90, time.Now().Add(time.Hour)); !errors.Is(err, errFrameMemory) {
		t.Fatalf("after close: %v", err)
	}
}
