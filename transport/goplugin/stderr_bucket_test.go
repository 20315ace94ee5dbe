package goplugin

import (
	"testing"
	"time"
)

// The stderr bucket lets a burst of ten seconds' worth through, then the
// rate, by lines and by bytes, whichever runs out first.
func TestStderrBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newStderrBucket(5, 1000, func() time.Time { return now })
	allowed := 0
	for range 100 {
		if b.allow(10) {
			allowed++
		}
	}
	if allowed != 50 {
		t.Fatalf("burst let %d lines through, want 50 (10 s of 5 lines/s)", allowed)
	}
	now = now.Add(time.Second)
	allowed = 0
	for range 100 {
		if b.allow(10) {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("after a second, %d lines, want 5", allowed)
	}
	// Bytes: a full bucket holds 10,000 bytes; 4,000-byte lines pass twice.
	now = now.Add(time.Hour)
	allowed = 0
	for range 10 {
		if b.allow(4000) {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("%d lines of 4000 bytes from a full bucket of 10000 bytes, want 2", allowed)
	}
	// A clock going backwards adds nothing.
	now = now.Add(-time.Minute)
	if b.allow(4000) {
		t.Fatal("a line passed with the clock going backwards and the bytes spent")
	}
}
