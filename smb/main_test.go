package smb

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, then fails the run if any goroutine (a writer's, a cross-process reader's)
// outlived them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
