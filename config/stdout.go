package config

import "github.com/tracepipe/tracepipe/sinks"

// WritesStdout reports whether a file sink of c streams to standard
// output (path "-", flat or in its file section), so that a client can
// refuse to write a binary trace to a terminal.
func (c *Config) WritesStdout() bool {
	for _, s := range c.Sinks {
		if s.Type != sinks.SinkTypeFile {
			continue
		}
		if s.Path == sinks.StdoutPath {
			return true
		}
		if p, ok := s.Sections[sinks.SinkTypeFile]["path"].(string); ok && p == sinks.StdoutPath {
			return true
		}
	}
	return false
}
