package perfettosvc

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlived the tests (a consumer
// session's Run, a producer connection, a read pass), as package
// pipeline's tests, where these came from, are checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
