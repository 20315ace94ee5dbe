package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// runCLI runs the tracepipe command line in-process, as main does.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestHelpMentionsFlags runs `--help` on every command of the tree and
// checks that the help names each of the command's flags.
func TestHelpMentionsFlags(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk(newRootCmd(), nil)
	for _, want := range [][]string{{"stats"}, {"inspect"}, {"validate"}, {"run"}, {"protovm", "apply"}} {
		found := false
		for _, p := range paths {
			found = found || strings.Join(p, " ") == strings.Join(want, " ")
		}
		if !found {
			t.Errorf("command %q is not registered", want)
		}
	}
	for _, path := range paths {
		// Look the command up in a fresh tree: flags are per tree.
		cmd, _, err := newRootCmd().Find(path)
		if err != nil {
			t.Fatalf("%v: %v", path, err)
		}
		stdout, stderr, code := runCLI(t, append(append([]string{}, path...), "--help")...)
		if code != exitOK || stderr != "" {
			t.Errorf("%v --help: exit %d, stderr %q", path, code, stderr)
		}
		if !strings.Contains(stdout, "Usage:") {
			t.Errorf("%v --help has no usage:\n%s", path, stdout)
		}
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(stdout, "--"+f.Name) {
				t.Errorf("%v --help does not mention --%s:\n%s", path, f.Name, stdout)
			}
		})
	}
	// The root help explains the pipeline and lists the commands.
	stdout, _, _ := runCLI(t, "--help")
	for _, want := range []string{"SMB", "TraceBuffer", "ProtoVM", "sinks", "Perfetto", "stats", "inspect", "validate", "run", "protovm"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("root help lacks %q", want)
		}
	}
	// The command-specific flags appear where they belong.
	for _, c := range []struct{ cmd, flag string }{
		{"stats", "--fail-on-loss"}, {"stats", "--all"}, {"stats", "--json"},
		{"inspect", "--packets"}, {"validate", "--set"}, {"validate", "--print"}, {"validate", "--config"},
	} {
		stdout, _, _ := runCLI(t, c.cmd, "--help")
		if !strings.Contains(stdout, c.flag) {
			t.Errorf("%s --help does not mention %s", c.cmd, c.flag)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"bogus"},
		{"stat", "x"}, // typo of stats
		{"protovm", "bogus"},
		{"stats"},
		{"stats", "--no-such-flag", "x"},
		{"inspect", "--packets", "many", "x"},
		{"inspect", "--packets", "-1", "x"},
		{"validate", "a.yaml", "extra-arg.yaml"}, // one config at most
		{"run", "-c", "a.yaml", "b.yaml"},        // the config twice
		{"validate", "--set", "novalue"},
		{"protovm", "compile"}, // required -i missing
	} {
		stdout, stderr, code := runCLI(t, args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, exitUsage, stderr)
		}
		if !strings.HasPrefix(stderr, "tracepipe: ") || !strings.Contains(stderr, "--help") {
			t.Errorf("%q: stderr %q", args, stderr)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q", args, stdout)
		}
	}
	_, stderr, _ := runCLI(t, "bogus")
	if !strings.Contains(stderr, `unknown command "bogus"`) {
		t.Errorf("unknown command message: %q", stderr)
	}
	for typo, want := range map[string]string{"stat": "stats", "inspekt": "inspect", "valdate": "validate"} {
		_, stderr, _ = runCLI(t, typo, "x")
		if !strings.Contains(stderr, "did you mean "+want) {
			t.Errorf("no suggestion for %q: %q", typo, stderr)
		}
	}
}

func TestBareCommandShowsHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"protovm"}} {
		stdout, stderr, code := runCLI(t, args...)
		if code != exitOK || stderr != "" || !strings.Contains(stdout, "Available Commands:") {
			t.Errorf("%q: exit %d, stderr %q, stdout:\n%s", args, code, stderr, stdout)
		}
	}
}
