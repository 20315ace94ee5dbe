package main

import (
	"runtime"
	"runtime/debug"
)

// version describes the build: the module version (or "devel"), the VCS
// revision and state when the build recorded them, and the Go version.
func version() string {
	v := "devel"
	var rev, modified string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = "+dirty"
				}
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " (" + rev + modified + ")"
	}
	return v + " " + runtime.Version()
}
