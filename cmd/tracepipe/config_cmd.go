package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/config"
)

// newConfigCmd builds `tracepipe config`: the configuration schema, as a
// JSON Schema for editors and as the Markdown reference in docs/. Both
// come from pipeline.Schema, the code's own description of every key.
func newConfigCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Print the configuration schema (JSON Schema) or reference (Markdown)",
		Long: `Print the configuration schema, derived from the code: every key, its type,
default, the sink types that take it, and a description.

  config schema      a JSON Schema (draft-07) that YAML and JSON editors use
                     for completion and checks, e.g. with the YAML language
                     server: # yaml-language-server: $schema=tracepipe.schema.json
  config reference   the Markdown reference, docs/configuration-reference.md
  config perfetto-fields
                     every field of Perfetto's TraceConfig and what the
                     consumer port (perfetto -c) does with it: mapped,
                     accepted or refused; docs/perfetto-traceconfig.md`,
	}
	c.AddCommand(&cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the configuration file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := config.JSONSchema()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return err
		},
	})
	c.AddCommand(&cobra.Command{
		Use:   "reference",
		Short: "Print the configuration reference in Markdown",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := config.ReferenceMarkdown()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	})
	c.AddCommand(&cobra.Command{
		Use:   "perfetto-fields",
		Short: "Print what a Perfetto TraceConfig's fields become (Markdown)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(config.PerfettoTraceConfigMarkdown())
			return err
		},
	})
	return c
}
