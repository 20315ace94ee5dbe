package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// --version names the source: the go command's VCS stamp, else the one
// `make build` passes, else says how to get one (it printed a bare
// "devel go1.26.8").
func TestVersionOf(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	own := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings(
		"vcs.revision", "aef922dedebd28b5bb60c7e390f8b1ff7d65a7d2", "vcs.time", "2026-11-27T08:22:34Z", "vcs.modified", "true")}
	ld := vcsStamp{"0123456789abcdef0123", "2026-11-26T10:00:00Z", "false"}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ld   vcsStamp
		want string
	}{
		{"go command's stamp", own, vcsStamp{}, "devel (aef922dedebd+dirty, 2026-11-27T08:22:34Z) go1.26.8"},
		{"go command's stamp wins", own, ld, "devel (aef922dedebd+dirty, 2026-11-27T08:22:34Z) go1.26.8"},
		{"make build's stamp", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, ld, "devel (0123456789ab, 2026-11-26T10:00:00Z) go1.26.8"},
		{"module version", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, vcsStamp{}, "v1.2.3 go1.26.8"},
		{"nothing recorded", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, vcsStamp{},
			"devel (no VCS information recorded: build with `make build`, or `go build` in a git clone without -buildvcs=false) go1.26.8"},
		{"no build info", nil, ld, "devel (0123456789ab, 2026-11-26T10:00:00Z) go1.26.8"},
	} {
		if got := versionOf(c.bi, "go1.26.8", c.ld); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// Shell completion is listed in the root help (it was a hidden command).
func TestHelpListsCompletion(t *testing.T) {
	stdout, _, code := runCLI(t, "--help")
	if code != exitOK || !strings.Contains(stdout, "\n  completion ") {
		t.Fatalf("--help: exit %d, no completion command listed:\n%s", code, stdout)
	}
	stdout, _, code = runCLI(t, "completion", "bash")
	if code != exitOK || !strings.Contains(stdout, "bash completion") {
		t.Fatalf("completion bash: exit %d\n%.200s", code, stdout)
	}
}
