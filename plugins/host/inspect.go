package host

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/tracepipe/tracepipe/plugins/internal/wire"
)

// DataSourceInfo is what a plugin says about one data source it serves.
type DataSourceInfo struct {
	Name        string
	Description string
	ConfigKeys  []ConfigKey
}

// ConfigKey documents one key of a data source's config section.
type ConfigKey struct {
	Name, Type, Description, Default string
}

// maxInspectStderr bounds the stderr a plugin asked to describe itself or
// check a config may write through (the rest is counted).
const maxInspectStderr = 64 << 10

// inspect starts path without an SMB, runs fn against it and ends it.
func inspect(ctx context.Context, path string, stderr io.Writer, fn func(context.Context, wire.DataSourceClient) error) error {
	if stderr != nil {
		capped := &cappedWriter{w: stderr, left: maxInspectStderr, limit: maxInspectStderr}
		defer capped.report(path)
		stderr = capped
	}
	c, err := dial(ctx, path, -1, stderr, DefaultStartTimeout, Limits{})
	if err != nil {
		return err
	}
	defer c.kill()
	callCtx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	return fn(callCtx, c.rpc)
}

// Describe asks the plugin at path which data sources it serves.
func Describe(ctx context.Context, path string, stderr io.Writer) ([]DataSourceInfo, error) {
	var out []DataSourceInfo
	err := inspect(ctx, path, stderr, func(ctx context.Context, rpc wire.DataSourceClient) error {
		resp, err := rpc.Describe(ctx, &wire.DescribeRequest{})
		if err != nil {
			return fmt.Errorf("plugin %s: describe: %s", path, describe(err))
		}
		for _, d := range resp.GetDataSources() {
			info := DataSourceInfo{Name: d.GetName(), Description: d.GetDescription()}
			for _, k := range d.GetConfigKeys() {
				info.ConfigKeys = append(info.ConfigKeys, ConfigKey{Name: k.GetName(), Type: k.GetType(), Description: k.GetDescription(), Default: k.GetDefault()})
			}
			out = append(out, info)
		}
		return nil
	})
	return out, err
}

// Validate asks the plugin at path to check a data source's config without
// setting anything up. It returns the problems the plugin found (nil: the
// config is fine); err reports a plugin that could not be asked or does
// not serve name.
func Validate(ctx context.Context, path, name string, config map[string]any, stderr io.Writer) ([]ConfigProblem, error) {
	cfg, err := wire.ConfigStruct(config)
	if err != nil {
		return nil, fmt.Errorf("plugin %s: data source %q: %v", path, name, err)
	}
	var problems []ConfigProblem
	err = inspect(ctx, path, stderr, func(ctx context.Context, rpc wire.DataSourceClient) error {
		resp, err := rpc.Validate(ctx, &wire.ValidateRequest{Name: name, Config: cfg})
		if err != nil {
			return fmt.Errorf("plugin %s: validate: %s", path, describe(err))
		}
		if resp.GetUnknownDataSource() {
			return fmt.Errorf("plugin %s does not serve a data source named %q", path, name)
		}
		problems = configProblems(resp.GetProblems())
		return nil
	})
	return problems, err
}

// cappedWriter passes the first left bytes through and counts the rest.
type cappedWriter struct {
	mu      sync.Mutex
	w       io.Writer
	left    int
	limit   int // left at the start
	dropped int
}

func (c *cappedWriter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(b), c.left)
	if n > 0 {
		_, _ = c.w.Write(b[:n])
		c.left -= n
	}
	c.dropped += len(b) - n
	return len(b), nil
}

// report says how much was dropped, if anything; the child must be gone.
func (c *cappedWriter) report(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dropped > 0 {
		fmt.Fprintf(c.w, "\ntracepipe: plugin %s: %d more bytes of stderr suppressed (over %d)\n", path, c.dropped, c.limit)
	}
}
