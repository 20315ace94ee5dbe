// Package config owns a tracing session's configuration end to end: the
// types (Config and its sections, names mirroring Perfetto's TraceConfig),
// loading a YAML, TOML or JSON file through koanf (config_load.go) with
// TRACEPIPE_ environment overrides (config_env.go) and --set overrides,
// decoding with field-path messages (config_decode.go), defaults
// (Config.SetDefaults), validation that names the field of every problem
// (config_validate.go, plugin_limits.go, triggers.go, protovm_path.go),
// warnings about valid but likely unintended settings (config_warn.go),
// the Perfetto TraceConfig mapping — a text TraceConfig
// (config_perfetto_text.go), a serialized one from a consumer
// (perfetto_traceconfig.go), perfetto_config in YAML
// (config_perfetto_yaml.go) — and the schema that `tracepipe config
// schema`, `config reference` and `config perfetto-fields` print and
// docs/ is generated from (config_schema.go, perfetto_fields.go).
// It also answers what a config implies for the session's output:
// LossContext (how its trace's loss counters read: loss_context.go) and
// WritesStdout (stdout.go).
//
// Config files, environment variables and Perfetto TraceConfigs are
// untrusted input: every bad value becomes a Problem naming its field (or
// file, line and column), never a panic; sizes, depths and counts are
// bounded.
//
// It must not import the session machinery (pipeline, plugins/host, the
// buffer or SMB runtime): cmd/, tools/ and the Perfetto service read and
// check configs without a session. It consults component registries only
// (sinks, plugins, protovm, perfettoipc's descriptors) to check the
// sections each component reads.
package config
