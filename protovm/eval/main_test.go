package eval

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, then fails the run if any goroutine started by
// a test (a decompressing reader's) outlived them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
