package builtin

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, then fails the run if any goroutine (a data source's poller or writer)
// outlived them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
