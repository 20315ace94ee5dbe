package main

import (
	"runtime"
	"runtime/debug"
)

// The VCS stamp `make build` passes with -ldflags -X, for builds where the
// go command records none itself: in a git worktree (it looks for a .git
// directory) or with GOFLAGS=-buildvcs=false. The go command's own stamp
// wins when both exist.
var (
	stampRevision string // full commit hash
	stampTime     string // commit time, RFC 3339 UTC
	stampModified string // "true" when the work tree had changes
)

// vcsStamp is what the build recorded of the source's version control.
type vcsStamp struct{ revision, time, modified string }

// version describes the build: the module version (or "devel"), the VCS
// revision, commit time and state when the build recorded them, and the
// Go version.
func version() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi, runtime.Version(), vcsStamp{stampRevision, stampTime, stampModified})
}

// versionOf renders the version from build info bi (nil: none), the Go
// version and the -ldflags stamp ld.
func versionOf(bi *debug.BuildInfo, goVersion string, ld vcsStamp) string {
	v := "devel"
	st := ld
	if bi != nil {
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
			v = mv
		}
		var own vcsStamp
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				own.revision = s.Value
			case "vcs.time":
				own.time = s.Value
			case "vcs.modified":
				own.modified = s.Value
			}
		}
		if own.revision != "" {
			st = own
		}
	}
	if st.revision == "" {
		if v == "devel" {
			return "devel (no VCS information recorded: build with `make build`, or `go build` in a git clone without -buildvcs=false) " + goVersion
		}
		return v + " " + goVersion
	}
	rev := st.revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if st.modified == "true" {
		rev += "+dirty"
	}
	if st.time != "" {
		rev += ", " + st.time
	}
	return v + " (" + rev + ") " + goVersion
}
