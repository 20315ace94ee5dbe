package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/internal/logline"
	"github.com/tracepipe/tracepipe/sinks"
)

// Log formats of --log-format.
const (
	logFormatText = "text" // "<time> tracepipe: warning: <message>" lines, for a person
	logFormatJSON = "json" // one slog JSON record per line, for a log collector
)

// addLogFormatFlag adds --log-format to a command that logs while it runs.
func addLogFormatFlag(c *cobra.Command, format *string) {
	c.Flags().StringVar(format, "log-format", logFormatText, "how log lines are written to stderr: text (time, then the message) or json (one JSON record per line, with the message's facts as fields under \"detail\")")
}

// newLogger returns the logger of run and serve. Text lines keep the CLI's
// look after the time: "tracepipe: " then "warning: " for a warning, the
// message, then any attributes as key=value, except the sinks.DetailKey
// group, which repeats the message's facts for JSON readers. linePrefix
// goes before each line (none today: run's status line is cleared by its
// console writer, syncWriter). JSON writes slog's JSON records, every
// attribute included.
func newLogger(w io.Writer, format, linePrefix string) (*slog.Logger, error) {
	switch format {
	case logFormatText, "":
		return slog.New(logline.NewHandler(w, linePrefix, sinks.DetailKey)), nil
	case logFormatJSON:
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
}
