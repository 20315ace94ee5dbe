package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, then fails the run if any goroutine (a session's,
// a signal handler's) outlived them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
