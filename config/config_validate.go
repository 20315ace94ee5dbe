package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/sinks"
)

// Problem is one thing wrong with a config: the key path
// ("buffers[1].size_kb", "sinks") and what is wrong.
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ValidationError holds every problem found in a config, in the order of
// the keys (unknown keys and mistyped values first, then rule violations).
type ValidationError struct {
	Problems []Problem
}

// Error lists the problems one per line, "path: message".
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Validate applies the defaults (SetDefaults) and checks every rule,
// returning all problems at once as a *ValidationError (nil when valid).
// As side effects it resolves data_sources[i].plugin and
// data_sources[i].protovm.program against the config file's directory (the
// current directory for a Config not made by Load), compiles each ProtoVM
// program into ProgramBytes and sets data_sources[i].target_buffer from
// target_buffer_name. Factories of registered data sources are called with
// their config section to validate it (they are pure: no goroutines, no I/O).
func (c *Config) Validate() error {
	c.SetDefaults()
	if ps := c.check(nil); len(ps) > 0 {
		return &ValidationError{Problems: ps}
	}
	return nil
}

// checker collects rule violations, except under paths that already have a
// decoding problem (a mistyped value must not also be reported as, say,
// "must be > 0" for the zero value it left behind).
type checker struct {
	skip     []Problem
	problems []Problem
}

func (k *checker) bad(path, format string, args ...any) {
	for _, s := range k.skip {
		if path == s.Path || strings.HasPrefix(path, s.Path+".") || strings.HasPrefix(path, s.Path+"[") {
			return
		}
	}
	k.problems = append(k.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// check returns the rule violations; defaults must already be applied.
func (c *Config) check(skip []Problem) []Problem {
	k := &checker{skip: skip}

	if c.PluginDir != "" {
		c.PluginDir = c.resolve(c.PluginDir)
		if fi, err := os.Stat(c.PluginDir); err != nil || !fi.IsDir() {
			k.bad("plugin_dir", "%q is not a directory", c.PluginDir)
		}
	}
	if c.Duration < 0 || c.Duration > MaxDuration {
		k.bad("duration", "must be >= 0 and <= 7 days (168h), got %v", c.Duration)
	}
	if c.WriteIntoFile && c.FileWritePeriod < MinPeriod {
		k.bad("file_write_period", "must be >= 100ms when write_into_file is true, got %v", c.FileWritePeriod)
	}
	if c.MaxFileSize < 0 {
		k.bad("max_file_size", "must be >= 0 (0 = unlimited), got %d", c.MaxFileSize)
	} else if c.MaxFileSize > 0 && c.MaxFileSize < sinks.MinMaxFileSize {
		k.bad("max_file_size", "must be 0 (unlimited) or >= 1MiB (bytes on disk per file), got %d", c.MaxFileSize)
	}
	if c.FlushPeriod != 0 && c.FlushPeriod < MinPeriod {
		k.bad("flush_period", "must be 0 (no periodic flush) or >= 100ms, got %v", c.FlushPeriod)
	}
	if c.FlushTimeout <= 0 || c.FlushTimeout > MaxFlushTimeout {
		k.bad("flush_timeout", "must be > 0 and <= 5m, got %v", c.FlushTimeout)
	}
	if c.StatsPeriod < MinStatsPeriod {
		k.bad("stats_period", "must be >= 1s, got %v", c.StatsPeriod)
	}
	if p := c.IncrementalState.ClearPeriod; p != 0 && p < MinPeriod {
		k.bad("incremental_state.clear_period", "must be 0 (never) or >= 100ms, got %v", p)
	}
	c.checkProducers(k)
	c.Perfetto.check(k) // config_perfetto.go
	c.checkBuffers(k)
	switch n := len(c.DataSources); {
	case n == 0:
		k.bad("data_sources", "at least one data source is required")
	case n > MaxDataSources:
		// Not checked one by one: that would be as many problems.
		k.bad("data_sources", "at most %d data sources are allowed, got %d", MaxDataSources, n)
	default:
		for i := range c.DataSources {
			c.checkDataSource(k, i)
		}
	}
	if n := len(c.Sinks); n > MaxSinks {
		k.bad("sinks", "at most %d sinks are allowed, got %d", MaxSinks, n)
		return k.problems
	}
	c.checkSinks(k)
	c.checkTriggers(k) // triggers.go
	return k.problems
}

func (c *Config) checkProducers(k *checker) {
	page, size := c.Producers.SMBPageSizeKB, c.Producers.SMBSizeKB
	pageOK := page >= 4 && page <= MaxSMBPageSizeKB && page%4 == 0 && (page/4)&(page/4-1) == 0
	if !pageOK {
		k.bad("producers.smb_page_size_kb", "must be 4, 8, 16 or 32 (a power-of-two multiple of 4 KiB, at most the service's 32 KiB page; smb-abi §1.1), got %d", page)
	}
	for _, f := range []struct {
		key  string
		size uint32
	}{{"producers.smb_size_kb", size}, {"producers.plugin_smb_size_kb", c.Producers.PluginSMBSizeKB}} {
		switch {
		case f.size > MaxSMBSizeKB:
			k.bad(f.key, "must be <= 32768 (32 MiB, the largest SMB the service creates; smb-abi §1.1), got %d", f.size)
		case pageOK && f.size%page != 0:
			k.bad(f.key, "must be a multiple of smb_page_size_kb (%d) (smb-abi §1.1), got %d", page, f.size)
		}
	}
}

func (c *Config) checkBuffers(k *checker) {
	switch n := len(c.Buffers); {
	case n == 0:
		k.bad("buffers", "at least one buffer is required")
	case n > MaxBuffers:
		k.bad("buffers", "at most 128 buffers are allowed, got %d", n)
	}
	names := map[string]int{}
	for i, b := range c.Buffers {
		p := fmt.Sprintf("buffers[%d]", i)
		switch {
		case b.SizeKB == 0 || b.SizeKB%4 != 0:
			k.bad(p+".size_kb", "must be a multiple of 4 and > 0")
		case b.SizeKB > MaxBufferSizeKB:
			k.bad(p+".size_kb", "must be < 4194304 (4 GiB), got %d", b.SizeKB)
		}
		switch b.FillPolicy {
		case FillPolicyRingBuffer, FillPolicyDiscard:
		default:
			k.bad(p+".fill_policy", "must be ring_buffer or discard, got %q", b.FillPolicy)
		}
		if b.ClearBeforeClone && !b.TransferOnClone {
			k.bad(p+".clear_before_clone", "only works with transfer_on_clone: true (as in Perfetto)")
		}
		if b.Name != "" {
			if j, dup := names[b.Name]; dup {
				k.bad(p+".name", "%q is already the name of buffers[%d]", b.Name, j)
			} else {
				names[b.Name] = i
			}
		}
	}
}

func (c *Config) checkDataSource(k *checker, i int) {
	ds := &c.DataSources[i]
	p := fmt.Sprintf("data_sources[%d]", i)

	var factory plugins.Factory
	if ds.Name == "" {
		k.bad(p+".name", "required")
	} else if len(ds.Name) > maxNameLen {
		k.bad(p+".name", "%d bytes, at most %d", len(ds.Name), maxNameLen)
		return // every other problem would quote the name
	}
	if ds.Plugin != "" {
		// The name is whatever the plugin registers; it is checked when
		// the plugin is launched.
		ds.Plugin = c.resolve(ds.Plugin)
		checkExecutable(k, p+".plugin", ds.Plugin)
	} else if ds.Name != "" {
		f, ok := plugins.Lookup(ds.Name)
		if !ok && c.PluginDir != "" {
			// A plugin in plugin_dir may serve it: ResolvePlugins (run by
			// New and `tracepipe validate`) finds it or says why not.
			ok = true
		}
		if !ok && c.Perfetto.Enabled {
			// Perfetto producers may register it: New binds the ones
			// connected or says none did.
			ok = true
		}
		if !ok {
			reg := strings.Join(plugins.Names(), ", ")
			if reg == "" {
				reg = "none"
			}
			k.bad(p+".name", "unknown data source %q (registered: %s)", ds.Name, reg)
		}
		factory = f
	}

	if ds.TargetBufferName != "" {
		found := false
		for j, b := range c.Buffers {
			if b.Name == ds.TargetBufferName {
				ds.TargetBuffer, found = j, true
				break
			}
		}
		if !found {
			var names []string
			for _, b := range c.Buffers {
				if b.Name != "" {
					names = append(names, b.Name)
				}
			}
			have := "no buffer has a name"
			if len(names) > 0 {
				have = "buffers: " + strings.Join(names, ", ")
			}
			k.bad(p+".target_buffer_name", "no buffer is named %q (%s)", ds.TargetBufferName, have)
		}
	} else if n := len(c.Buffers); n > 0 && (ds.TargetBuffer < 0 || ds.TargetBuffer >= n) {
		k.bad(p+".target_buffer", "must be in 0..%d (there are %d buffers), got %d", n-1, n, ds.TargetBuffer)
	}

	if r := ds.Restart; r != nil {
		if r.Max < 0 || r.Max > 100 {
			k.bad(p+".restart.max", "must be in 0..100, got %d", r.Max)
		}
		if r.Backoff < 0 || r.Backoff > time.Hour {
			k.bad(p+".restart.backoff", "must be in 0..1h, got %v", r.Backoff)
		}
	}

	checkPluginLimits(k, p+".limits", ds.Limits, factory != nil)

	switch ds.OnStartError {
	case "", OnStartErrorContinue, OnStartErrorAbort:
	default:
		k.bad(p+".on_start_error", "must be continue or abort, got %q", ds.OnStartError)
	}

	switch ds.BufferExhaustedPolicy {
	case BufferExhaustedDrop, BufferExhaustedStall:
	default:
		k.bad(p+".buffer_exhausted_policy", "must be drop or stall, got %q", ds.BufferExhaustedPolicy)
	}

	if factory != nil {
		if err := callFactory(factory, ds.Config); err != nil {
			for _, q := range plugins.ConfigProblems(err) {
				if q.Path == "" {
					k.bad(p+".config", "%s", q.Message)
				} else {
					k.bad(p+".config."+q.Path, "%s", q.Message)
				}
			}
		}
	}

	if vm := ds.ProtoVM; vm != nil {
		c.checkProtoVM(k, p+".protovm", vm)
	}
	c.checkPerfettoConfig(k, i, factory != nil)
}

// checkPerfettoConfig checks data_sources[i].perfetto_config and that
// every config section has a reader: `config` is read by built-in and
// plugin data sources, perfetto_config by Perfetto producers. A section
// its data source cannot read is an error, never ignored. (Which one
// serves a name both a built-in and a producer have is known only when
// the session binds its producers: buildProducers checks that case.)
func (c *Config) checkPerfettoConfig(k *checker, i int, builtin bool) {
	ds := &c.DataSources[i]
	p := fmt.Sprintf("data_sources[%d]", i)
	perfettoOnly := ds.Plugin == "" && !builtin && c.PluginDir == "" && c.Perfetto.Enabled
	switch {
	case len(ds.Config) > 0 && perfettoOnly:
		k.bad(p+".config", "nothing reads it: %q is served by Perfetto producers, which read no config section; their DataSourceConfig goes in %s.perfetto_config (e.g. perfetto_config: {sys_stats_config: {meminfo_period_ms: 500}})", ds.Name, p)
	case len(ds.Config) > 0 && ds.PerfettoConfig != nil && ds.Plugin == "" && c.Perfetto.Enabled:
		// A built-in's name: a Perfetto producer (reads perfetto_config)
		// or the built-in (reads config) serves it, never both, so one
		// section is always unread (buildProducers would refuse it).
		k.bad(p+".config", "nothing reads it: %s.perfetto_config makes a Perfetto producer serve %q, and producers read no config section (give one of config, for the built-in, and perfetto_config, for a producer)", p, ds.Name)
	}
	switch {
	case ds.PerfettoConfig != nil && ds.Plugin != "":
		k.bad(p+".perfetto_config", "nothing reads it: a plugin serves this data source, and plugins read %s.config", p)
	case ds.PerfettoConfig != nil && !c.Perfetto.Enabled:
		k.bad(p+".perfetto_config", "nothing reads it: only Perfetto producers do, and perfetto.enabled is false")
	case ds.PerfettoConfig != nil:
		ds.EncodedPerfettoConfig = encodePerfettoConfig(k, p+".perfetto_config", ds.PerfettoConfig)
	case len(ds.EncodedPerfettoConfig) > 0:
		// A Perfetto consumer's DataSourceConfig: the producers get it
		// through the schema, so it must parse.
		if err := proto.Unmarshal(ds.EncodedPerfettoConfig, &perfettoipc.DataSourceConfig{}); err != nil {
			k.bad(p+".config", "the DataSourceConfig does not parse: %v", err)
		}
	}
}

// callFactory runs a data source's factory to validate its config section.
// The instance is discarded (factories are pure); a panic is a problem.
func callFactory(f plugins.Factory, cfg map[string]any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the data source's factory panicked: %v", r)
		}
	}()
	_, err = f(cfg)
	return err
}

func (c *Config) checkProtoVM(k *checker, p string, vm *ProtoVMConfig) {
	if vm.MemoryLimitKB == 0 {
		k.bad(p+".memory_limit_kb", "required, must be > 0")
	}
	if vm.Program == "" {
		k.bad(p+".program", "required")
		return
	}
	vm.Program = c.resolve(vm.Program)
	ext := strings.ToLower(filepath.Ext(vm.Program))
	switch ext {
	case ".bin", ".pb", ".yaml", ".yml":
	default:
		k.bad(p+".program", "%q: want a compiled VmProgram (.bin, .pb) or a program description (.yaml, .yml)", vm.Program)
		return
	}
	b, err := readFileLimited(vm.Program)
	if err != nil {
		if os.IsNotExist(err) {
			k.bad(p+".program", "%q does not exist", vm.Program)
		} else {
			k.bad(p+".program", "%v", err)
		}
		return
	}
	var src []byte // a YAML description, which may declare `serves`
	if ext == ".bin" || ext == ".pb" {
		if _, err := protovm.ParseProgram(b); err != nil {
			k.bad(p+".program", "%q: %v", vm.Program, err)
			return
		}
	} else {
		src = b
		if b, err = protovm.Compile(src, nil); err != nil {
			k.bad(p+".program", "%q: %v", vm.Program, err)
			return
		}
	}
	vm.ProgramBytes = b
	resolveProtoVMPath(k, p, vm, src) // protovm_path.go
}

// resolve makes a relative path relative to the config file's directory.
func (c *Config) resolve(path string) string {
	if path == "" || filepath.IsAbs(path) || c.baseDir == "" {
		return path
	}
	return filepath.Join(c.baseDir, path)
}

func checkExecutable(k *checker, p, path string) {
	fi, err := os.Stat(path)
	switch {
	case os.IsNotExist(err):
		k.bad(p, "%q does not exist", path)
	case err != nil:
		k.bad(p, "%v", err)
	case fi.IsDir():
		k.bad(p, "%q is a directory, not an executable", path)
	case !fi.Mode().IsRegular():
		k.bad(p, "%q is not a regular file", path)
	case fi.Mode().Perm()&0o111 == 0:
		k.bad(p, "%q is not executable (mode %v)", path, fi.Mode().Perm())
	}
}

func (c *Config) checkSinks(k *checker) {
	if len(c.Sinks) == 0 {
		// Streaming or not, a session without a sink records nothing.
		k.bad("sinks", "at least one sink is required (or pass -o FILE to tracepipe run)")
	}
	paths := map[string]int{}
	for i, s := range c.Sinks {
		p := fmt.Sprintf("sinks[%d]", i)
		if _, err := s.Build(); err != nil {
			var fe sinks.FieldErrors
			if !errors.As(err, &fe) {
				fe = sinks.FieldErrors{{Message: err.Error()}}
			}
			for _, e := range fe.Prefixed(p) {
				k.bad(e.Path, "%s", e.Message)
			}
		}
		if path, key := sinkFilePath(&s); path != "" && path != sinks.StdoutPath {
			clean := filepath.Clean(path)
			if j, dup := paths[clean]; dup {
				k.bad(p+"."+key, "%q is already the path of sinks[%d]", path, j)
			} else {
				paths[clean] = i
			}
		}
	}
}

// sinkFilePath returns a file sink's path and the key it was given under
// ("path" or "file.path"), or "" for other sinks.
func sinkFilePath(s *sinks.Config) (path, key string) {
	if s.Type != sinks.SinkTypeFile {
		return "", ""
	}
	if s.Path != "" {
		return s.Path, "path"
	}
	p, _ := s.Sections[sinks.SinkTypeFile]["path"].(string)
	return p, "file.path"
}
