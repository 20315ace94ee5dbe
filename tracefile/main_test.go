package tracefile

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

//go:generate go test -run ^$ . -args -write-fuzz-corpus

// writeCorpus is set by the go:generate step above: the test binary then
// rewrites testdata/fuzz from fuzzSeeds and exits without running tests.
var writeCorpus = flag.Bool("write-fuzz-corpus", false, "rewrite testdata/fuzz from the seeds and exit")

// TestMain runs the tests, then fails the run if any goroutine (a zstd
// decoder's, a reader's) outlived them.
func TestMain(m *testing.M) {
	flag.Parse()
	if *writeCorpus {
		if err := writeFuzzCorpus(generateTB{}); err != nil {
			fmt.Fprintln(os.Stderr, "write-fuzz-corpus:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// generateTB lets the seed builders, written for tests, run under go
// generate: a helper's failure ends the generation with its message.
type generateTB struct{ testing.TB }

func (generateTB) Helper()                      {}
func (generateTB) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (generateTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
