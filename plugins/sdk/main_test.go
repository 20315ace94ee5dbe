package sdk

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, then fails the run if any goroutine (a plugin server's, a gRPC connection's)
// outlived them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
