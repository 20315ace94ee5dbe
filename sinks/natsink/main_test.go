package natsink

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlived the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
