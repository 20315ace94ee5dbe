package host

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	plugin "github.com/hashicorp/go-plugin"
)

// ExitError is a launch failure of a child that exited (or was killed)
// before it served: Status says how, e.g. "exited with status 2".
type ExitError struct {
	Status string
	Err    error
}

func (e *ExitError) Error() string { return fmt.Sprintf("%s: %v", e.Status, e.Err) }
func (e *ExitError) Unwrap() error { return e.Err }

// ExitOf returns how the child of a failed Launch ended, if it did.
func ExitOf(err error) (string, bool) {
	var e *ExitError
	if errors.As(err, &e) {
		return e.Status, true
	}
	return "", false
}

// exitPoll is how often waitExit looks whether go-plugin reaped the child.
const exitPoll = 5 * time.Millisecond

// waitExit waits up to d for the child to be reaped and describes how it
// ended. go-plugin reaps the child on its own goroutine and sets Exited
// under its lock once cmd.Wait returned, so ProcessState is safe to read
// after Exited reported true.
func waitExit(cmd *exec.Cmd, cli *plugin.Client, d time.Duration) (string, bool) {
	deadline := time.Now().Add(d)
	for !cli.Exited() {
		if time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(exitPoll)
	}
	st := cmd.ProcessState
	if st == nil {
		return "", false
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal()), true
	}
	return fmt.Sprintf("exited with status %d", st.ExitCode()), true
}

// WaitExit waits up to d for the child to end (it is not asked to) and
// says how it ended: "exited with status 2", "was killed by signal 9
// (killed)". ok is false while it still runs.
func (p *Plugin) WaitExit(d time.Duration) (status string, ok bool) {
	return waitExit(p.cmd, p.cli, d)
}

// Finished is closed when the plugin's data source reported that it wrote
// everything it will (plugins.Finite); nil when the data source never ends
// on its own.
func (p *Plugin) Finished() <-chan struct{} { return p.finished }
