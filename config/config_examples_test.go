package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/configs"
	_ "github.com/tracepipe/tracepipe/plugins/builtin" // the data sources the examples name
)

// TestExampleConfigs loads every config shipped in configs/ (from the
// directory, so that relative paths such as ProtoVM programs resolve) with
// the builtin data sources registered, and checks that the embedded default
// is the same file.
func TestExampleConfigs(t *testing.T) {
	names, err := fs.Glob(configs.Files, "*.yaml")
	if err != nil || len(names) < 4 {
		t.Fatalf("configs: %v %v", names, err)
	}
	for _, name := range names {
		c, err := Load(LoadOptions{Path: filepath.Join("..", "configs", name)})
		if err != nil {
			t.Errorf("%s:\n%v", name, err)
			continue
		}
		if _, err := c.Dump(); err != nil {
			t.Errorf("%s: Dump: %v", name, err)
		}
	}
}

func TestEmbeddedDefaultConfig(t *testing.T) {
	c, err := Load(LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Loaded without a directory: a file's relative paths would be the
	// file's directory's, the embedded default's the working directory's.
	data, err := os.ReadFile(filepath.Join("..", "configs", configs.Default))
	if err != nil {
		t.Fatal(err)
	}
	fromDir, err := loadBytes(configs.Default, data, "", nil, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.String() != fromDir.String() {
		t.Errorf("embedded default differs from configs/%s", configs.Default)
	}
	// What the brief for `tracepipe run` without -c promises.
	if c.Duration != 10*time.Second || !c.WriteIntoFile || c.FileWritePeriod != time.Second {
		t.Errorf("duration %v write_into_file %v file_write_period %v", c.Duration, c.WriteIntoFile, c.FileWritePeriod)
	}
	if len(c.Buffers) != 2 || c.Buffers[0] != (BufferConfig{Name: "main", SizeKB: 16384, FillPolicy: FillPolicyRingBuffer}) || c.Buffers[1].Name != "process" || c.Buffers[1].SizeKB != 1024 {
		t.Errorf("buffers %+v", c.Buffers)
	}
	want := map[string]int{"linux.process_stats": 1, "linux.sys_stats": 0, "tracepipe.synthetic": 0}
	if len(c.DataSources) != len(want) {
		t.Errorf("data sources %+v", c.DataSources)
	}
	for _, ds := range c.DataSources {
		if b, ok := want[ds.Name]; !ok || ds.TargetBuffer != b {
			t.Errorf("data source %s in buffer %d", ds.Name, ds.TargetBuffer)
		}
	}
	if len(c.Sinks) != 1 || c.Sinks[0].Type != "file" || c.Sinks[0].Path != "out/trace-{timestamp}.pftrace" {
		t.Errorf("sinks %+v", c.Sinks)
	}
}
