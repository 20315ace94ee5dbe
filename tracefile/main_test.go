package tracefile

import (
	"fmt"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

//go:generate go test -run ^$ . -args -write-fuzz-corpus

// TestMain runs the tests, then fails the run if any goroutine (a zstd
// decoder's, a reader's) outlived them; under go generate it rewrites
// testdata/fuzz from fuzzSeeds instead.
func TestMain(m *testing.M) {
	testsupport.Main(m, func() error { return writeFuzzCorpus(generateTB{}) })
}

// generateTB lets the seed builders, written for tests, run under go
// generate: a helper's failure ends the generation with its message.
type generateTB struct{ testing.TB }

func (generateTB) Helper()                      {}
func (generateTB) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (generateTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
