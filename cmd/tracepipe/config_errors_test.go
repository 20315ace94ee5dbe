package main

import (
	"strings"
	"testing"
)

// TestConfigErrorsNameTheFieldToType: each problem a newcomer met (issue
// 23) names the key the user must type, with the exact message.
func TestConfigErrorsNameTheFieldToType(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string // lines of stderr after the header
	}{
		{name: "relay section key missing", args: []string{"--set", "sinks[1].type=relay"},
			want: []string{"sinks[1].relay.address: required for a relay sink (host:port of `tracepipe serve`)"}},
		{name: "relay key written beside type", args: []string{"--set", "sinks[1].type=relay", "--set", "sinks[1].address=127.0.0.1:1"},
			want: []string{
				"sinks[1].address: unknown key (did you mean sinks[1].relay.address? a relay sink's settings go in its relay section)",
				"sinks[1].relay.address: required for a relay sink (host:port of `tracepipe serve`)"}},
		{name: "nats section keys missing", args: []string{"--set", "sinks[1].type=nats"},
			want: []string{
				"sinks[1].nats.url: required for a nats sink, e.g. nats://127.0.0.1:4222",
				"sinks[1].nats.subject: required for a nats sink"}},
		{name: "typo inside a typed section", args: []string{"--set", "sinks[1].type=nats", "--set", "sinks[1].nats.url=nats://127.0.0.1:4222", "--set", "sinks[1].nats.subjct=t"},
			want: []string{
				"sinks[1].nats.subject: required for a nats sink",
				"sinks[1].nats.subjct: unknown key (did you mean subject?)"}},
		{name: "rule violations name their variable", env: map[string]string{"TRACEPIPE_BUFFERS__0__SIZE_KB": "333", "TRACEPIPE_DURATION": "200h"},
			want: []string{
				"duration: must be >= 0 and <= 7 days (168h), got 200h0m0s (set by TRACEPIPE_DURATION)",
				"buffers[0].size_kb: must be a multiple of 4 and > 0 (set by TRACEPIPE_BUFFERS__0__SIZE_KB)"}},
		{name: "filter kind typo", args: []string{"--set", `sinks[0].filter=packet.kind == "trackevent"`},
			want: []string{`sinks[0].filter: sinks: filter "packet.kind == \"trackevent\"": packet.kind is never "trackevent" (did you mean "track_event"?)`}},
		{name: "filter kind typo in a list", args: []string{"--set", `sinks[0].filter=packet.kind in ["track_event", "sysstats"]`},
			want: []string{`sinks[0].filter: sinks: filter "packet.kind in [\"track_event\", \"sysstats\"]": packet.kind is never "sysstats" (did you mean "sys_stats"?)`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, stderr, code := runCLI(t, append([]string{"validate"}, c.args...)...)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if code != exitError || len(lines) < 1 || !strings.Contains(lines[0], "invalid config") {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			if got := strings.Join(lines[1:], "\n"); got != strings.Join(c.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(c.want, "\n"))
			}
		})
	}
}

// TestFilterKnownKindsPass: filters naming real kinds, an unknown field by
// number, or no kind at all, still load.
func TestFilterKnownKindsPass(t *testing.T) {
	for _, f := range []string{`packet.kind == "track_event"`, `packet.kind != "process_tree"`, `packet.size > 0 && "sys_stats" == packet.kind`,
		`packet.kind in ["track_event", "field_900000"]`, `packet.kind == ""`, `packet.size > 10`} {
		stdout, stderr, code := runCLI(t, "validate", "--set", "sinks[0].filter="+f)
		if code != exitOK || !strings.Contains(stdout, "config OK") {
			t.Errorf("filter %s: exit %d, stderr %s", f, code, stderr)
		}
	}
}

// TestYAMLSyntaxErrorLine: a syntax error names the line holding the
// problem (the parser named the line before it, counting from 0).
func TestYAMLSyntaxErrorLine(t *testing.T) {
	cases := []struct{ text, want string }{
		{"duration: 10s\nbuffers:\n  - size_kb: 1024\n  fill_policy: discard\n", "yaml: line 4: did not find expected '-' indicator"},
		{"duration: 10s\nbuffers:\n  - size_kb: 1024\n    fill_policy: [x\nsinks: []\n", "yaml: line 4: did not find expected ',' or ']'"},
		{"duration: 10s\nbuffers:\n  - size_kb: 1024\n\tfill_policy: x\n", "yaml: line 4: found a tab character that violates indentation"},
		{"a: [1,\n  2]\nb: 2\nc: 3\n d: 4\n", "yaml: line 5: mapping values are not allowed in this context"},
	}
	for _, c := range cases {
		path := writeFile(t, "syntax.yaml", []byte(c.text))
		_, stderr, code := runCLI(t, "validate", path)
		if want := "tracepipe: " + path + ": " + c.want + "\n"; code != exitError || stderr != want {
			t.Errorf("%q: exit %d, stderr %q, want %q", c.text, code, stderr, want)
		}
	}
}

// TestValidatePrintShowsEffectiveValues: --print shows the values a session
// uses, not the zero values that stand for them (queue_capacity: 0,
// when_full: "", on_start_error: "", fsync_period: 0s, no NATS defaults),
// and its output loads again.
func TestValidatePrintShowsEffectiveValues(t *testing.T) {
	stdout, stderr, code := runCLI(t, "validate", "--print", "--set", "sinks[1].type=nats",
		"--set", "sinks[1].nats.url=nats://127.0.0.1:4222", "--set", "sinks[1].nats.subject=t")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	for _, bad := range []string{"queue_capacity: 0\n", "when_full: \"\"", "on_start_error: \"\"", "fsync_period: 0s", "filter_error: \"\"", "on_error: \"\""} {
		if strings.Contains(stdout, bad) {
			t.Errorf("--print shows %q:\n%s", bad, stdout)
		}
	}
	for _, want := range []string{"queue_capacity: 16\n", "when_full: block\n", "on_start_error: continue\n", "fsync_period: 5s\n",
		"    nats:\n", "      ack_timeout: 5s\n", "      max_inflight: 16\n", "      max_batches: 64\n", "      stream: TRACEPIPE\n", "      close_timeout: 5s\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--print lacks %q:\n%s", want, stdout)
		}
	}
	path := writeFile(t, "printed.yaml", []byte(stdout))
	if out, stderr, code := runCLI(t, "validate", path); code != exitOK {
		t.Errorf("the printed config does not validate: exit %d %s %s", code, out, stderr)
	}
}

// A plugin's verdict on a key a variable set names the variable too.
func TestPluginProblemNamesItsVariable(t *testing.T) {
	path := goodConfig(t)
	t.Setenv("TRACEPIPE_DATA_SOURCES__0__CONFIG__PACKETS", "-1")
	_, stderr, code := runCLI(t, "validate", "-c", path)
	if code == exitOK || !strings.Contains(stderr, "data_sources[0].config.packets: must be >= 0, got -1 (set by TRACEPIPE_DATA_SOURCES__0__CONFIG__PACKETS)") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
