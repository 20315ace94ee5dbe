package main

import (
	"encoding/json"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain either runs the CLI as a child process (startCLI sets
// childArgsEnv, so signal tests exercise the real binary's handlers), or
// runs the tests and then fails the run if any goroutine (a session's, a
// signal handler's) outlived them.
func TestMain(m *testing.M) {
	if a := os.Getenv(childArgsEnv); a != "" {
		var args []string
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			os.Exit(99)
		}
		os.Exit(run(args, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
