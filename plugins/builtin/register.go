package builtin

import "github.com/tracepipe/tracepipe/plugins"

func init() {
	plugins.Register(SyntheticName, func(m map[string]any) (plugins.DataSource, error) {
		cfg, err := ParseSyntheticConfig(m)
		if err != nil {
			return nil, err
		}
		return NewSynthetic(cfg), nil
	})
	plugins.Register(ProcessStatsName, func(m map[string]any) (plugins.DataSource, error) {
		cfg, err := ParseProcessStatsConfig(m)
		if err != nil {
			return nil, err
		}
		return NewProcessStats(cfg), nil
	})
	plugins.Register(SysStatsName, func(m map[string]any) (plugins.DataSource, error) {
		cfg, err := ParseSysStatsConfig(m)
		if err != nil {
			return nil, err
		}
		return NewSysStats(cfg), nil
	})
}
