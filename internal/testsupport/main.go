package testsupport

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// writeCorpusFlag is what a package's go:generate step passes to its test
// binary: `go test -run ^$ . -args -write-fuzz-corpus`.
var writeCorpusFlag = flag.Bool("write-fuzz-corpus", false, "rewrite testdata/fuzz from the seeds and exit (go generate)")

// Main is the TestMain of a package whose fuzz seed corpus is generated:
// with -write-fuzz-corpus it runs writeCorpus and exits without running a
// test; otherwise it runs the tests and fails the run if any goroutine
// outlived them (goleak).
func Main(m *testing.M, writeCorpus func() error) {
	flag.Parse()
	if *writeCorpusFlag {
		if err := writeCorpus(); err != nil {
			fmt.Fprintln(os.Stderr, "write-fuzz-corpus:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
