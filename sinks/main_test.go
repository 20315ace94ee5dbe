package sinks

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

//go:generate go test -run ^$ . -args -write-fuzz-corpus

// writeCorpus is set by the go:generate step above: the test binary then
// rewrites testdata/fuzz from filterSeeds and exits without running tests.
var writeCorpus = flag.Bool("write-fuzz-corpus", false, "rewrite testdata/fuzz from the seeds and exit")

// TestMain runs the tests, then fails the run if any goroutine (a sink's
// writer, a network connection's) outlived them.
func TestMain(m *testing.M) {
	flag.Parse()
	if *writeCorpus {
		if err := writeFuzzCorpus(); err != nil {
			fmt.Fprintln(os.Stderr, "write-fuzz-corpus:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
