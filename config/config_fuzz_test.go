package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/protovm"
)

// fuzzFormats maps the fuzzer's format byte to a file extension.
var fuzzFormats = [...]string{".yaml", ".toml", ".json"}

// FuzzLoadConfig feeds arbitrary file bytes (as YAML, TOML or JSON, chosen
// by format) and overrides (one per line of overrides: lines starting with
// TRACEPIPE_ are environment entries, the others --set values) to the
// loader. Properties: no panic, no hang; every error has a message and
// every problem a message; a config that loads validates again unchanged,
// and its Dump loads back to the same config.
//
// The seed corpus is testdata/fuzz/FuzzLoadConfig; the directory the config
// "lives in" holds a ProtoVM program (prog.yaml, prog.bin) and a plugin
// binary (plug) so that paths can resolve.
func FuzzLoadConfig(f *testing.F) {
	dir := f.TempDir()
	writeFile(f, dir, "prog.yaml", progYAML)
	bin, err := protovm.Compile([]byte(progYAML), nil)
	if err != nil {
		f.Fatal(err)
	}
	writeFile(f, dir, "prog.bin", string(bin))
	writeFile(f, dir, "plug", "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(dir, "plug"), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(goodYAML), uint8(0), "")
	f.Add([]byte(goodTOML), uint8(1), "")
	f.Add([]byte(goodJSON), uint8(2), "duration=1s\nTRACEPIPE_BUFFERS__2__SIZE_KB=8")
	f.Fuzz(func(t *testing.T, data []byte, format uint8, overrides string) {
		ext := fuzzFormats[int(format)%len(fuzzFormats)]
		var sets, env []string
		if overrides != "" {
			for line := range strings.SplitSeq(overrides, "\n") {
				if strings.HasPrefix(line, EnvPrefix) {
					env = append(env, line)
				} else {
					sets = append(sets, line)
				}
			}
		}
		start := time.Now()
		c, err := loadBytes(filepath.Join(dir, "fuzz"+ext), data, dir, env, sets, "", nil)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Load took %v", d)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("error without a message")
			}
			var ve *ValidationError
			if errors.As(err, &ve) {
				if len(ve.Problems) == 0 {
					t.Fatal("ValidationError without problems")
				}
				for _, p := range ve.Problems {
					if p.Message == "" {
						t.Fatalf("problem without a message: %#v", p)
					}
				}
			}
			return
		}
		before, err := c.Dump()
		if err != nil {
			t.Fatalf("Dump: %v", err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("loaded config does not validate again: %v", err)
		}
		if after, _ := c.Dump(); string(after) != string(before) {
			t.Fatalf("Validate changed a valid config:\n%s\n---\n%s", before, after)
		}
		c2, err := loadBytes(filepath.Join(dir, "dump.yaml"), before, dir, nil, nil, "", nil)
		if err != nil {
			t.Fatalf("the dump does not load: %v\n%s", err, before)
		}
		// The free-form data-source sections may change representation
		// through YAML (a TOML date becomes a string); the rest may not.
		for i := range c.DataSources {
			c.DataSources[i].Config, c2.DataSources[i].Config = nil, nil
		}
		// Which variables were applied is provenance, not config.
		c.envs, c2.envs = nil, nil
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("the dump loads differently:\n%s\n%#v\n%#v", before, c, c2)
		}
	})
}
