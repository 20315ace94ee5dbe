package perfetto

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if a := os.Getenv(benchProducerEnv); a != "" { // bench_test.go
		os.Exit(benchProducer(a))
	}
	// A goroutine outliving the tests (a connection, a producer's control
	// goroutine) fails the run.
	goleak.VerifyTestMain(m)
}
