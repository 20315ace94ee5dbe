package config

import "github.com/tracepipe/tracepipe/tracefile"

// LossContext is what the trace a session of c writes will tell `tracepipe
// stats` through its echoed trace_config (tracefile.DecodeLossContext):
// whether the session streams, and which buffers are rings. A summary
// written as the session ends reads its loss counters the same way.
func (c *Config) LossContext() tracefile.LossContext {
	lc := tracefile.LossContext{Known: true, WriteIntoFile: c.WriteIntoFile}
	for _, b := range c.Buffers {
		lc.Ring = append(lc.Ring, b.FillPolicy != FillPolicyDiscard)
	}
	return lc
}
