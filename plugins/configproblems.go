package plugins

import (
	"regexp"
	"strings"
)

// ConfigProblem is one thing a factory found wrong in its config section:
// Path is relative to the section ("rate", "targets[2].name"; "" = the
// section as a whole).
type ConfigProblem struct {
	Path    string
	Message string
}

// problemLine is one "path: message" line of a factory error.
var problemLine = regexp.MustCompile(`^([A-Za-z0-9_.\[\]]+): (.*)$`)

// ConfigProblems splits a factory's error into problems, the convention
// every data source follows (in process and in plugins): one problem per
// line reading "path: message"; a line that does not is the continuation
// of the previous message or, first, a problem without a path.
func ConfigProblems(err error) []ConfigProblem {
	var out []ConfigProblem
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if m := problemLine.FindStringSubmatch(line); m != nil {
			out = append(out, ConfigProblem{Path: m[1], Message: m[2]})
		} else if len(out) > 0 {
			out[len(out)-1].Message += "\n" + line
		} else if line != "" {
			out = append(out, ConfigProblem{Message: line})
		}
	}
	return out
}
