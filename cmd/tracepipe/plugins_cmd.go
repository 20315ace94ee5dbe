package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/transport/goplugin"
)

const pluginsLong = `List the data-source plugins in a directory: each executable whose name
starts with "tracepipe-plugin-" is asked (a short-lived process, no
tracing) which data sources it serves, with their description and config
keys; other files are never run. The directory is --dir, else the
plugin_dir of the config given with -c. A data source listed here can be
used by name alone in data_sources[i].name when plugin_dir names the
directory.`

// newPluginsCmd builds `tracepipe plugins`.
func newPluginsCmd() *cobra.Command {
	var dir, path string
	c := &cobra.Command{
		Use:     "plugins [--dir D | -c CONFIG]",
		Short:   "List data-source plugins and what they serve",
		Long:    pluginsLong,
		Example: `  tracepipe plugins --dir ./plugins`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" && path != "" {
				cfg, err := config.Load(config.LoadOptions{Path: path, Env: os.Environ(), Warn: warnTo(cmd.ErrOrStderr())})
				if err != nil {
					return err
				}
				dir = cfg.PluginDir
			}
			if dir == "" {
				return usageError{errors.New("no plugin directory: pass --dir D, or -c CONFIG with plugin_dir set")}
			}
			return listPlugins(cmd.Context(), dir, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "plugin directory")
	c.Flags().StringVarP(&path, "config", "c", "", "config file whose plugin_dir to list")
	return c
}

func listPlugins(ctx context.Context, dir string, w io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	list, err := goplugin.ListPlugins(ctx, dir, nil)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		_, err := fmt.Fprintf(w, "no plugins in %s (a plugin is an executable named %s*)\n", dir, goplugin.PluginPrefix)
		return err
	}
	var failed int
	for _, pl := range list {
		fmt.Fprintln(w, pl.Path)
		if pl.Err != nil {
			failed++
			fmt.Fprintf(w, "  error: %v\n", pl.Err)
			continue
		}
		for _, ds := range pl.DataSources {
			fmt.Fprintf(w, "  %s", ds.Name)
			if ds.Description != "" {
				fmt.Fprintf(w, "  %s", ds.Description)
			}
			fmt.Fprintln(w)
			for _, k := range ds.ConfigKeys {
				fmt.Fprintf(w, "    config.%s", k.Name)
				if k.Type != "" {
					fmt.Fprintf(w, " (%s", k.Type)
					if k.Default != "" {
						fmt.Fprintf(w, ", default %s", k.Default)
					}
					fmt.Fprint(w, ")")
				}
				if k.Description != "" {
					fmt.Fprintf(w, "  %s", k.Description)
				}
				fmt.Fprintln(w)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d executables in %s could not be asked (not tracepipe plugins?)", failed, len(list), dir)
	}
	return nil
}
