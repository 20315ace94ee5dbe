package protovm

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, then fails the run if any goroutine started by a test
// outlived them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
