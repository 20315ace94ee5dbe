package goplugin

import (
	"context"
	"fmt"
	"io"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins/host"
)

// ValidatePlugins asks the plugin of every plugin data source to check its
// config section (a validate-only call: the plugin builds nothing that
// runs) and returns the problems as a *ValidationError, with paths under
// data_sources[i].config; nil when every plugin accepts its config. It
// starts one short-lived process per plugin data source, so Validate (which
// must stay cheap and side-effect free) does not call it; `tracepipe
// validate` does. stderr receives the plugins' own output (nil: dropped).
func ValidatePlugins(ctx context.Context, cfg *config.Config, stderr io.Writer) error {
	if err := ResolvePlugins(ctx, cfg, stderr); err != nil {
		return err
	}
	var problems []config.Problem
	for i, ds := range cfg.DataSources {
		if ds.Plugin == "" {
			continue
		}
		p := fmt.Sprintf("data_sources[%d]", i)
		found, err := host.Validate(ctx, ds.Plugin, ds.Name, ds.Config, stderr)
		if err != nil {
			problems = append(problems, config.Problem{Path: p + ".plugin", Message: err.Error()})
			continue
		}
		for _, q := range found {
			path := p + ".config"
			if q.Path != "" {
				path += "." + q.Path
			}
			problems = append(problems, config.Problem{Path: path, Message: q.Message})
		}
	}
	if len(problems) > 0 {
		return &config.ValidationError{Problems: cfg.AttributeEnv(problems)}
	}
	return nil
}
