package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/transport/goplugin"
)

const validateLong = `Load a tracepipe config the way 'tracepipe run' does and check it: the file
given as the argument or with -c (YAML, TOML or JSON, or a Perfetto text
TraceConfig: .pbtxt, .textproto, .cfg; the embedded default when none is
given), then TRACEPIPE_ environment overrides, then --set flags, in that
order. A text config is checked as run runs it: only its perfetto.*
settings may be overridden, and a problem names the file, line and field
(t.pbtxt:13: duration_ms: ...).

Prints "config OK: N buffers, M data sources, K sinks", or every problem
found, one per line, and exits 1. With --print the effective config is
printed as YAML, and the OK line follows as a YAML comment so that the
output can be saved and used as a config (not for a text config, whose
producers' DataSourceConfigs and filters have no YAML form).`

// newValidateCmd builds `tracepipe validate`.
func newValidateCmd() *cobra.Command {
	var (
		path     string
		sets     []string
		printCfg bool
	)
	c := &cobra.Command{
		Use:   "validate [CONFIG | -c CONFIG] [--set key=value]... [--print]",
		Short: "Load and check a config; optionally print the effective config",
		Long:  validateLong,
		Example: `  tracepipe validate configs/default.yaml
  tracepipe validate --set duration=10s --print
  tracepipe validate -c trace_config.pbtxt`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := configArg(cmd, &path, args); err != nil {
				return err
			}
			for _, s := range sets {
				if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
					return usageError{fmt.Errorf("--set %q: want key=value", s)}
				}
			}
			return runValidate(path, sets, printCfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVarP(&path, "config", "c", "", "config file (YAML, TOML or JSON; or a Perfetto text TraceConfig: .pbtxt, .textproto, .cfg); default: the embedded default config")
	c.Flags().StringArrayVar(&sets, "set", nil, "override one config key, e.g. --set duration=10s (repeatable; applied last)")
	c.Flags().BoolVar(&printCfg, "print", false, "print the effective config as YAML")
	return c
}

func runValidate(path string, sets []string, printCfg bool, stdout, stderr io.Writer) error {
	var cfg *config.Config
	var err error
	if config.IsTraceConfigText(path) {
		// As `run -c x.pbtxt` loads it (run_cmd.go).
		if printCfg {
			return usageError{fmt.Errorf("--print: %s is a Perfetto text config, which has no faithful YAML form (its data sources wait for Perfetto producers before a built-in stands in, and producer_name_filter/producer_name_regex_filter have no YAML key); validate it without --print", path)}
		}
		cfg, err = loadTextRunConfig(path, "", sets, false, 0, stderr)
	} else {
		cfg, err = config.Load(config.LoadOptions{Path: path, Sets: sets, Env: os.Environ(), Warn: warnTo(stderr)})
	}
	if err == nil {
		// Plugins check their own config sections (a validate-only call).
		err = goplugin.ValidatePlugins(context.Background(), cfg, nil)
	}
	if err != nil {
		// A *ValidationError lists its problems one per line without
		// naming the file; other errors (unreadable file, bad syntax, bad
		// --set) already name what failed.
		var verr *config.ValidationError
		if errors.As(err, &verr) {
			source := "the embedded default config"
			if path != "" {
				source = path
			}
			return fmt.Errorf("invalid config (%s), %d problem(s):\n%w", source, len(verr.Problems), err)
		}
		return err
	}
	ok := fmt.Sprintf("config OK: %d buffers, %d data sources, %d sinks", len(cfg.Buffers), len(cfg.DataSources), len(cfg.Sinks))
	if !printCfg {
		_, err = fmt.Fprintln(stdout, ok)
		return err
	}
	yaml := cfg.String()
	if yaml != "" && !strings.HasSuffix(yaml, "\n") {
		yaml += "\n"
	}
	_, err = fmt.Fprintf(stdout, "%s# %s\n", yaml, ok)
	return err
}
