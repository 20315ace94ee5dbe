package config

import "fmt"

// Warnings lists settings that are valid but will likely not do what the
// config's author expects, each naming its field and what will happen.
// Load reports them through LoadOptions.Warn (validate, run); the
// Perfetto consumer port logs them for the sessions it creates.
func (c *Config) Warnings() []string { return c.WarningsSpelling(FillPolicyDiscard) }

// WarningsSpelling is Warnings with the fill policy spelt as the config at hand
// spells it ("discard" in YAML, "DISCARD" in a Perfetto TraceConfig).
func (c *Config) WarningsSpelling(discard string) []string {
	out := c.perfettoWarnings()
	if !c.WriteIntoFile {
		return out
	}
	for i, b := range c.Buffers {
		if b.FillPolicy != FillPolicyDiscard {
			continue
		}
		// TraceBuffer V2 semantics (reference/trace-buffer-v2.md §10):
		// reading does not free room in a discard buffer. traced's
		// older V1 buffer kept accepting data once it had been read, so
		// the same config records much more there.
		out = append(out, fmt.Sprintf("buffers[%d].fill_policy: %s with write_into_file: the buffer stops "+
			"accepting data for good once %d KiB have been written into it, although the periodic reads "+
			"already moved that data to the file; everything after is dropped (counted as chunks_discarded). "+
			"Use a ring buffer to stream a long trace",
			i, discard, b.SizeKB))
	}
	return out
}
