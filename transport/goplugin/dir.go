package goplugin

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/host"
)

// PluginInfo is one plugin executable and what it says it serves.
type PluginInfo struct {
	Path        string
	DataSources []host.DataSourceInfo
	Err         error // the plugin could not be asked
}

// PluginPrefix starts the file name of every plugin in a plugin
// directory (tracepipe-plugin-counter). ListPlugins runs only such files:
// asking a program what it serves means running it, and a directory like
// /usr/bin holds many programs that are not plugins.
const PluginPrefix = "tracepipe-plugin-"

// ListPlugins asks every executable file in dir whose name starts with
// PluginPrefix which data sources it serves (one short-lived process
// each), sorted by path. Other files are not run.
func ListPlugins(ctx context.Context, dir string, stderr io.Writer) ([]PluginInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("plugin_dir: %w", err)
	}
	var out []PluginInfo
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), PluginPrefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path) // follows symlinks
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue
		}
		ds, err := host.Describe(ctx, path, stderr)
		out = append(out, PluginInfo{Path: path, DataSources: ds, Err: err})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// ResolvePlugins gives every data source that names neither a plugin nor
// an in-process data source the plugin in plugin_dir that serves it. It
// returns a *ValidationError naming each data source no plugin serves.
func ResolvePlugins(ctx context.Context, cfg *config.Config, stderr io.Writer) error {
	var need []int
	for i, ds := range cfg.DataSources {
		if ds.Plugin == "" && ds.Name != "" {
			if _, ok := plugins.Lookup(ds.Name); !ok {
				need = append(need, i)
			}
		}
	}
	if len(need) == 0 || cfg.PluginDir == "" {
		return nil
	}
	list, err := ListPlugins(ctx, cfg.PluginDir, stderr)
	if err != nil {
		return &config.ValidationError{Problems: []config.Problem{{Path: "plugin_dir", Message: err.Error()}}}
	}
	serves := map[string]string{}
	var names []string
	for _, pl := range list {
		for _, d := range pl.DataSources {
			if _, dup := serves[d.Name]; !dup {
				serves[d.Name] = pl.Path
				names = append(names, d.Name)
			}
		}
	}
	sort.Strings(names)
	var problems []config.Problem
	for _, i := range need {
		ds := &cfg.DataSources[i]
		path, ok := serves[ds.Name]
		if !ok {
			have := strings.Join(names, ", ")
			if have == "" {
				have = "none"
			}
			problems = append(problems, config.Problem{Path: fmt.Sprintf("data_sources[%d].name", i),
				Message: fmt.Sprintf("unknown data source %q: not built in (%s) and no plugin in %s serves it (they serve: %s; a plugin there is an executable named %s*)", ds.Name, strings.Join(plugins.Names(), ", "), cfg.PluginDir, have, PluginPrefix)})
			continue
		}
		ds.Plugin = path
		if ds.PerfettoConfig != nil {
			problems = append(problems, config.Problem{Path: fmt.Sprintf("data_sources[%d].perfetto_config", i),
				Message: fmt.Sprintf("nothing reads it: the plugin %s serves %q, and plugins read data_sources[%d].config", path, ds.Name, i)})
		}
	}
	if len(problems) > 0 {
		return &config.ValidationError{Problems: problems}
	}
	return nil
}
