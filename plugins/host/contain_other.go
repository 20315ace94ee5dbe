//go:build !linux

package host

import (
	"errors"
	"os/exec"
)

// Outside Linux a plugin child is contained by its process group only
// (ended with it: see killGroup): a descendant that leaves the group
// (setsid) outlives it, and limits are not supported.

type tree struct{}

func newTree(cmd *exec.Cmd, path string, limits Limits) (*tree, error) {
	if limits.set() {
		return nil, errors.New("plugin limits (memory, cpu) are supported on Linux only")
	}
	return &tree{}, nil
}

func (t *tree) mechanism() string                        { return "process group" }
func (t *tree) started(cmd *exec.Cmd, alive func() bool) {}
func (t *tree) cgroupFailed(cmd *exec.Cmd) bool          { return false }
func (t *tree) kill()                                    {}
func (t *tree) end()                                     {}
func (t *tree) memoryLimitHit() bool                     { return false }
