package testsupport

import (
	"testing"
	"time"
)

// WaitFor polls cond every millisecond until it holds or timeout passes,
// and reports whether it held: a test's wait on a condition with a
// deadline, which the caller turns into its own failure message.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// WaitUntil fails t unless cond holds within d, naming what it waited for
// and how long: the wait of a test that has nothing better to do when the
// condition never comes.
func WaitUntil(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	if !WaitFor(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}
