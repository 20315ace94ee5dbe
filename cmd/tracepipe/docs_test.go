package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/configs"
	"github.com/tracepipe/tracepipe/tpimport"
)

// The documentation's tests: README.md and docs/*.md are checked against
// the code on every `make test`, so that what a newcomer reads is what the
// program does.

// repoRoot is the module root, seen from this package's directory.
const repoRoot = "../.."

// docFiles returns README.md and every docs/*.md, relative to repoRoot.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(repoRoot, m)
		files = append(files, rel)
	}
	return files
}

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fencedBlock is one ``` block of a Markdown file.
type fencedBlock struct {
	lang, body string
	line       int // line of the opening fence, 1-based
}

var fenceRE = regexp.MustCompile("(?ms)^```([A-Za-z0-9]*)\n(.*?)^```[ \t]*$")

func fencedBlocks(doc string) []fencedBlock {
	var out []fencedBlock
	for _, m := range fenceRE.FindAllStringSubmatchIndex(doc, -1) {
		out = append(out, fencedBlock{
			lang: doc[m[2]:m[3]],
			body: doc[m[4]:m[5]],
			line: strings.Count(doc[:m[0]], "\n") + 1,
		})
	}
	return out
}

// The reference and the JSON Schema in docs/ are what the code generates
// now (`make docs` regenerates them).
func TestDocsConfigReferenceIsCurrent(t *testing.T) {
	for _, c := range []struct {
		file string
		gen  func() ([]byte, error)
	}{
		{"docs/configuration-reference.md", config.ReferenceMarkdown},
		{"docs/perfetto-traceconfig.md", func() ([]byte, error) { return config.PerfettoTraceConfigMarkdown(), nil }},
		{"docs/config.schema.json", func() ([]byte, error) {
			b, err := config.JSONSchema()
			return append(b, '\n'), err
		}},
	} {
		want, err := c.gen()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		got := readDoc(t, c.file)
		if got != string(want) {
			t.Errorf("%s is stale: run `make docs` (it differs from what the code generates)", c.file)
		}
	}
}

// Every key of the configuration is in the reference, and so every key of
// every shipped config: the schema holds no undocumented key.
func TestDocsSchemaDocumentsEveryKey(t *testing.T) {
	keys, err := config.Schema()
	if err != nil {
		t.Fatal(err)
	}
	ref := readDoc(t, "docs/configuration-reference.md")
	for _, want := range []string{"trigger_config", "rotate_period", "unique_session_name", "plugin_dir", "perfetto",
		"data_sources[].protovm", "data_sources[].restart", "data_sources[].on_start_error", "buffers[].transfer_on_clone",
		"sinks[].relay.address", "sinks[].nats.subject", "sinks[].file.buffer_size"} {
		i := slices.IndexFunc(keys, func(k config.SchemaKey) bool { return k.Path == want })
		if i < 0 {
			t.Errorf("the schema has no key %s", want)
			continue
		}
		if keys[i].Doc == "" {
			t.Errorf("%s has no description", want)
		}
		if !strings.Contains(ref, "| `"+want+"` |") {
			t.Errorf("the reference has no row for %s", want)
		}
	}
	for _, k := range keys {
		if k.Type == "" || k.Doc == "" {
			t.Errorf("%s: type %q, doc %q", k.Path, k.Type, k.Doc)
		}
	}
}

// schemaCheck walks a decoded YAML value against a JSON Schema node: every
// key must be a property the schema knows and every enumerated value one
// it allows. It returns the problems, by key path.
func schemaCheck(node map[string]any, v any, path string) []string {
	var out []string
	if alts, ok := node["oneOf"].([]any); ok && len(alts) > 0 {
		return nil // byte sizes: an integer or a string; Load checks the value
	}
	switch val := v.(type) {
	case map[string]any:
		props, ok := node["properties"].(map[string]any)
		if !ok {
			if node["type"] == "object" {
				return nil // free-form (data_sources[].config)
			}
			return []string{fmt.Sprintf("%s: a mapping where the schema wants %v", path, node["type"])}
		}
		for k, sub := range val {
			p := strings.TrimPrefix(path+"."+k, ".")
			pn, ok := props[k].(map[string]any)
			if !ok {
				out = append(out, p+": not in the schema")
				continue
			}
			out = append(out, schemaCheck(pn, sub, p)...)
		}
	case []any:
		items, ok := node["items"].(map[string]any)
		if !ok {
			return []string{path + ": a list where the schema wants " + fmt.Sprint(node["type"])}
		}
		for i, e := range val {
			out = append(out, schemaCheck(items, e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case string:
		if enum, ok := node["enum"].([]any); ok && !slices.Contains(enum, any(val)) {
			out = append(out, fmt.Sprintf("%s: %q is not one of %v", path, val, enum))
		}
	}
	return out
}

func loadJSONSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := config.JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("config schema is not JSON: %v", err)
	}
	return root
}

// The JSON Schema accepts every shipped config (so an editor using it
// flags nothing in them) and rejects an unknown key and a wrong enum.
func TestConfigSchemaAcceptsShippedConfigs(t *testing.T) {
	root := loadJSONSchema(t)
	if root["$schema"] == nil || root["additionalProperties"] != false {
		t.Fatalf("root: $schema %v, additionalProperties %v", root["$schema"], root["additionalProperties"])
	}
	names, err := fs.Glob(configs.Files, "*.yaml")
	if err != nil || len(names) == 0 {
		t.Fatalf("configs: %v %v", names, err)
	}
	for _, n := range names {
		b, _ := fs.ReadFile(configs.Files, n)
		var v map[string]any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if p := schemaCheck(root, v, ""); len(p) > 0 {
			t.Errorf("configs/%s against the schema: %s", n, strings.Join(p, "; "))
		}
	}
	bad := map[string]any{"durashun": "1s", "buffers": []any{map[string]any{"fill_policy": "ring"}}}
	p := schemaCheck(root, bad, "")
	slices.Sort(p)
	want := []string{`buffers[0].fill_policy: "ring" is not one of [ring_buffer discard]`, "durashun: not in the schema"}
	if !slices.Equal(p, want) {
		t.Errorf("schema check of a bad config = %q, want %q", p, want)
	}
}

// `tracepipe config schema` prints the schema as JSON.
func TestConfigSchemaCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"config", "schema"}, &out, &errb); code != exitOK {
		t.Fatalf("config schema: exit %d: %s", code, errb.String())
	}
	var v map[string]any
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("config schema output is not JSON: %v", err)
	}
	props, _ := v["properties"].(map[string]any)
	for _, k := range []string{"duration", "sinks", "trigger_config", "perfetto"} {
		if props[k] == nil {
			t.Errorf("config schema has no property %s", k)
		}
	}
}

// Every YAML block of the docs is a valid config: parsed, checked against
// the JSON Schema, then loaded and validated as `tracepipe validate` does.
// A block may be a fragment: its top-level keys replace those of the
// embedded default config (a complete config replaces them all). Plugin paths a block names are
// created as empty executables (the plugin's own checks are
// TestREADMEPluginBuildsAndRuns's).
func TestDocsYAMLBlocksAreValidConfigs(t *testing.T) {
	root := loadJSONSchema(t)
	defRaw, err := fs.ReadFile(configs.Files, configs.Default)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range docFiles(t) {
		for _, b := range fencedBlocks(readDoc(t, f)) {
			if b.lang != "yaml" && b.lang != "yml" {
				continue
			}
			n++
			where := fmt.Sprintf("%s:%d", f, b.line)
			var v map[string]any
			if err := yaml.Unmarshal([]byte(b.body), &v); err != nil {
				t.Errorf("%s: not valid YAML: %v", where, err)
				continue
			}
			if p := schemaCheck(root, v, ""); len(p) > 0 {
				t.Errorf("%s: against the schema: %s", where, strings.Join(p, "; "))
			}
			var def map[string]any
			if err := yaml.Unmarshal(defRaw, &def); err != nil {
				t.Fatal(err)
			}
			for k, x := range v {
				def[k] = x
			}
			v = def
			dir := t.TempDir()
			if ds, ok := v["data_sources"].([]any); ok {
				for _, d := range ds {
					if m, ok := d.(map[string]any); ok {
						if p, ok := m["plugin"].(string); ok {
							exe := filepath.Join(dir, p)
							if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
								t.Fatal(err)
							}
							if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
			}
			out, err := yaml.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			cfgPath := filepath.Join(dir, "block.yaml")
			if err := os.WriteFile(cfgPath, out, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := config.Load(config.LoadOptions{Path: cfgPath}); err != nil {
				t.Errorf("%s: not a valid config: %v", where, err)
			}
		}
	}
	if n < 3 {
		t.Fatalf("found %d YAML blocks in the docs; the fence pattern is broken", n)
	}
}

var (
	mdLinkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdPathRE = regexp.MustCompile("`((?:reference|docs|configs|[a-z]+)/[A-Za-z0-9_./-]+\\.md)`")
)

// The docs link nothing outside the repository: no http(s) links, every
// relative link names a file of the tree (and an anchor of it, for
// Markdown files), and every *.md path they cite in code spans exists.
func TestDocsLinksStayInRepository(t *testing.T) {
	for _, f := range docFiles(t) {
		doc := readDoc(t, f)
		for _, m := range mdLinkRE.FindAllStringSubmatch(doc, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				t.Errorf("%s links outside the repository: %s", f, target)
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			resolved := f
			if file != "" {
				resolved = filepath.Clean(filepath.Join(filepath.Dir(f), file))
			}
			if strings.HasPrefix(resolved, "..") {
				t.Errorf("%s: %s leaves the repository", f, target)
				continue
			}
			b, err := os.ReadFile(filepath.Join(repoRoot, resolved))
			if err != nil {
				t.Errorf("%s: broken link %s: %v", f, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") && !slices.Contains(mdAnchors(string(b)), anchor) {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", f, target, resolved, anchor)
			}
		}
		for _, m := range mdPathRE.FindAllStringSubmatch(doc, -1) {
			if _, err := os.Stat(filepath.Join(repoRoot, m[1])); err != nil {
				t.Errorf("%s cites %s, which is not in the repository", f, m[1])
			}
		}
	}
}

// mdAnchors returns the anchors GitHub derives from a file's headings:
// lower case, punctuation removed, spaces to hyphens.
func mdAnchors(doc string) []string {
	var out []string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var sb strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				sb.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				sb.WriteRune(r)
			}
		}
		out = append(out, sb.String())
	}
	return out
}

// shellWords splits a command line as a POSIX shell would for the simple
// lines of the tour: words, single and double quotes, a trailing comment,
// and a final "> FILE" redirection (returned apart).
func shellWords(line string) (words []string, redirect string, err error) {
	var cur strings.Builder
	inWord := false
	quote := rune(0)
scan:
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			break scan
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, "", fmt.Errorf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	if n := len(words); n >= 2 && words[n-2] == ">" {
		redirect, words = words[n-1], words[:n-2]
	}
	return words, redirect, nil
}

// The README's tour runs as written, command by command, in a fresh
// directory: each exits 0 (check may exit 3, its "findings" code: on a
// starved machine the default source loses packets, which check reports),
// and what it writes is there.
func TestREADMETourRuns(t *testing.T) {
	readme := readDoc(t, "README.md")
	i := strings.Index(readme, "\n## A ten-minute tour\n")
	if i < 0 {
		t.Fatal("README.md has no section \"A ten-minute tour\"")
	}
	sec := readme[i+1:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+3]
	}
	var lines []string
	for _, b := range fencedBlocks(sec) {
		if b.lang != "sh" {
			continue
		}
		for _, l := range strings.Split(b.body, "\n") {
			if strings.TrimSpace(l) != "" {
				lines = append(lines, l)
			}
		}
	}
	if len(lines) < 5 {
		t.Fatalf("the tour has %d commands, want a tour", len(lines))
	}
	t.Chdir(t.TempDir())
	for _, l := range lines {
		words, redirect, err := shellWords(l)
		if err != nil {
			t.Fatal(err)
		}
		if len(words) == 0 || words[0] != "tracepipe" {
			t.Fatalf("tour line %q: want a tracepipe command", l)
		}
		var out, errb bytes.Buffer
		code := run(words[1:], &out, &errb)
		if code == exitProblems && words[1] == "check" {
			// check ran and reported what it found: on a machine too loaded
			// to keep up with the default source, producer losses.
			t.Logf("tour: %s: findings (exit 3):\n%s", l, out.String())
			code = exitOK
		}
		if code != exitOK {
			t.Fatalf("tour: %s: exit %d\nstdout:\n%s\nstderr:\n%s", l, code, out.String(), errb.String())
		}
		if redirect != "" {
			if err := os.WriteFile(redirect, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if o := slices.Index(words, "-o"); o >= 0 && o+1 < len(words) {
			if fi, err := os.Stat(words[o+1]); err != nil || fi.Size() == 0 {
				t.Errorf("tour: %s: no output file %s (%v)", l, words[o+1], err)
				continue
			}
			// What the tour records must open in Perfetto with its data:
			// the filtered trace kept track_event packets but not the
			// descriptors that start their sequences, and trace_processor
			// would have imported none of them.
			if words[1] == "run" {
				r, err := tpimport.CheckFile(words[o+1], tpimport.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if r.ProducerPackets == 0 || r.ProducerImported == 0 {
					t.Errorf("tour: %s: trace_processor would import %d of its %d producer packets:\n%+v", l, r.ProducerImported, r.ProducerPackets, r.Findings)
				}
			}
		}
	}
}

// configs/default.yaml, the config a newcomer reads first, mentions every
// key of the schema (set, or commented out at its default): it missed
// trigger_config, rotate_period, unique_session_name, plugin_dir,
// perfetto, protovm, restart, on_start_error and transfer_on_clone. The
// sink sections of other types are the reference's.
func TestDefaultConfigMentionsEveryKey(t *testing.T) {
	b, err := fs.ReadFile(configs.Files, configs.Default)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	keys, err := config.Schema()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.HasPrefix(k.Path, "sinks[].") && (strings.Count(k.Path, ".") > 1 || k.Type == "section") {
			continue // relay/nats/file sections: docs/configuration-reference.md
		}
		last := k.Path[strings.LastIndexAny(k.Path, ".]")+1:]
		if !regexp.MustCompile(`(?m)^[#\s-]*(- )?`+regexp.QuoteMeta(last)+`:`).MatchString(text) &&
			!strings.Contains(text, last+": ") && !strings.Contains(text, "{"+last+":") {
			t.Errorf("configs/default.yaml does not mention %s", k.Path)
		}
	}
}

// The commands' help cites only documents of the repository: `check
// --help` cited reference/trace-processor-import.md, which is not in it.
func TestHelpCitesExistingDocs(t *testing.T) {
	mdRE := regexp.MustCompile(`[A-Za-z0-9_./-]+\.md\b`)
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for _, text := range []string{c.Long, c.Short, c.Example, c.Flags().FlagUsages()} {
			for _, p := range mdRE.FindAllString(text, -1) {
				n++
				if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
					t.Errorf("%s --help cites %s, which is not in the repository", c.CommandPath(), p)
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if n == 0 {
		t.Fatal("no command cites a document: check --help should cite docs/import-rules.md")
	}
}
