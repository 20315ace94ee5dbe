package testsupport

import "time"

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
