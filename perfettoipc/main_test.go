package perfettoipc

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a connection goroutine outlived its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
