package sinks

import (
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

//go:generate go test -run ^$ . -args -write-fuzz-corpus

// TestMain runs the tests, then fails the run if any goroutine (a sink's
// writer, a network connection's) outlived them; under go generate it
// rewrites testdata/fuzz from filterSeeds instead.
func TestMain(m *testing.M) { testsupport.Main(m, writeFuzzCorpus) }
