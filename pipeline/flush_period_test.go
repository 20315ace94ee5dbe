package pipeline

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/configs"
)

// Every shipped config that streams (write_into_file) ends up with a flush
// period, so its echoed trace_config carries flush_period_ms and
// trace_processor raises no config_write_into_file_no_flush (reference §6);
// an explicit flush_period is kept, and a config that does not stream gets
// none it did not ask for.
func TestStreamingConfigsFlush(t *testing.T) {
	for _, name := range []string{configs.Default, "long_streaming.yaml", "ring_buffer.yaml", "two_buffers.yaml"} {
		c, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", name)})
		if err != nil {
			t.Fatal(err)
		}
		if c.WriteIntoFile && c.FlushPeriod == 0 {
			t.Errorf("%s: write_into_file without flush_period", name)
		}
	}
	c, err := config.Load(config.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.FlushPeriod != c.FileWritePeriod || c.FlushPeriod != time.Second {
		t.Errorf("default config: flush_period %v, file_write_period %v; want both 1s", c.FlushPeriod, c.FileWritePeriod)
	}
	c, err = config.Load(config.LoadOptions{Sets: []string{"flush_period=3s"}})
	if err != nil || c.FlushPeriod != 3*time.Second {
		t.Errorf("explicit flush_period: %v %v", c.FlushPeriod, err)
	}
	c, err = config.Load(config.LoadOptions{Sets: []string{"write_into_file=false"}})
	if err != nil || c.FlushPeriod != 0 {
		t.Errorf("write_into_file=false: flush_period %v %v; want 0", c.FlushPeriod, err)
	}
}
