package sinks

import (
	"github.com/tracepipe/tracepipe/sinks/celfilter"
)

// These tests' configs filter sinks, as tracepipe's do (its main package
// hands the compiler to package sinks the same way).
func init() { UseFilterCompiler(celfilter.Compile) }
