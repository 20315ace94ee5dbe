package protovm

import (
	"fmt"
	"strings"
)

// Code is the outcome of ApplyPatch.
type Code uint8

const (
	// Ok means the program ran to the end (possibly skipping instructions).
	Ok Code = iota
	// Error is a recoverable failure (e.g. a path absent from this patch)
	// that propagated to the top of the program.
	Error
	// Abort means a program bug, incompatible data or an exceeded limit.
	Abort
)

func (c Code) String() string {
	switch c {
	case Ok:
		return "ok"
	case Error:
		return "error"
	case Abort:
		return "abort"
	}
	return fmt.Sprintf("Code(%d)", uint8(c))
}

// Status is the result of ApplyPatch. For Abort, Stack holds the messages
// from the innermost failure outwards (like Perfetto's abort stack trace,
// without source locations). Ok and Error carry no messages.
type Status struct {
	Code  Code
	Stack []string
}

// IsOk reports whether the status is Ok.
func (s Status) IsOk() bool { return s.Code == Ok }

// Message renders the abort stack as "inner <- ... <- outer".
func (s Status) Message() string { return strings.Join(s.Stack, " <- ") }

func (s Status) String() string {
	if len(s.Stack) == 0 {
		return s.Code.String()
	}
	return s.Code.String() + ": " + s.Message()
}

var (
	statusOk    = Status{Code: Ok}
	statusError = Status{Code: Error}
)

func abortf(format string, args ...any) Status {
	return Status{Code: Abort, Stack: []string{fmt.Sprintf(format, args...)}}
}

// wrap adds an outer context message to an abort; other codes pass through.
func (s Status) wrap(format string, args ...any) Status {
	if s.Code == Abort {
		s.Stack = append(s.Stack, fmt.Sprintf(format, args...))
	}
	return s
}
