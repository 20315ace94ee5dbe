package config

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/sinks"
)

// ConfigFromTraceConfig maps a serialized Perfetto TraceConfig (untrusted)
// to a session config, field by field as traceConfigFields
// (perfetto_fields.go) says: buffers, data sources (the whole
// DataSourceConfig is passed on to Perfetto producers), duration,
// streaming, flushes, trigger_config and incremental state are mapped;
// what the perfetto command adds is accepted; activate_triggers is
// accepted and not acted on, as traced's service does not read it (a
// warning says so). Every other field is an error naming it.
func ConfigFromTraceConfig(b []byte) (*Config, error) {
	cfg := &Config{Perfetto: PerfettoConfig{Enabled: true}}
	var bad []string
	var cloneLength time.Duration // a CLONE_SNAPSHOT session's trigger_timeout_ms
	err := walkProto(b, func(num protowire.Number, v uint64, payload []byte) error {
		switch num {
		case 1:
			bc := BufferConfig{}
			i := len(cfg.Buffers)
			err := walkProto(payload, func(n protowire.Number, v uint64, _ []byte) error {
				switch n {
				case 1:
					bc.SizeKB = uint32(v)
				case 4:
					switch v {
					case 0, 1:
						bc.FillPolicy = FillPolicyRingBuffer
					case 2:
						bc.FillPolicy = FillPolicyDiscard
					default:
						bad = append(bad, fmt.Sprintf("buffers[%d].fill_policy %d", i, v))
					}
				case 5:
					bc.TransferOnClone = v != 0
				case 6:
					bc.ClearBeforeClone = v != 0
				case 7:
					// set below from payload
				case 8:
					// experimental_mode: tracepipe's buffers are TraceBuffer V2
				default:
					bad = append(bad, fmt.Sprintf("buffers[%d].%s", i, traceConfigFieldName("buffers[]", n)))
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("buffers[%d]: %w", i, err)
			}
			bc.Name = stringField(payload, 7)
			cfg.Buffers = append(cfg.Buffers, bc)
		case 2:
			i := len(cfg.DataSources)
			var dsc []byte
			var filter ProducerFilter
			err := walkProto(payload, func(n protowire.Number, _ uint64, p []byte) error {
				switch n {
				case 1:
					dsc = p
				case 2:
					filter.names = append(filter.names, string(p))
				case 3:
					// A full match, as traced's std::regex_match.
					if len(p) > MaxRegexLen {
						return fmt.Errorf("producer_name_regex_filter[%d]: %d bytes, at most %d", len(filter.regexes), len(p), MaxRegexLen)
					}
					re, err := regexp.Compile(`^(?:` + string(p) + `)$`)
					if err != nil {
						return fmt.Errorf("producer_name_regex_filter[%d]: %w", len(filter.regexes), err)
					}
					filter.regexes = append(filter.regexes, re)
				default:
					bad = append(bad, fmt.Sprintf("data_sources[%d].%s", i, traceConfigFieldName("data_sources[]", n)))
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("data_sources[%d]: %w", i, err)
			}
			dc := DataSourceConfig{EncodedPerfettoConfig: append([]byte(nil), dsc...), PerfettoProducers: filter}
			err = walkProto(dsc, func(n protowire.Number, v uint64, _ []byte) error {
				switch n {
				case 2:
					dc.TargetBuffer = int(min(v, 1<<20))
				case 9:
					if v == 2 || v == 3 {
						dc.BufferExhaustedPolicy = BufferExhaustedStall
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("data_sources[%d].config: %w", i, err)
			}
			dc.Name = stringField(dsc, 1)
			dc.TargetBufferName = stringField(dsc, 11)
			cfg.DataSources = append(cfg.DataSources, dc)
		case 3:
			cfg.Duration = time.Duration(v) * time.Millisecond
		case 8:
			cfg.WriteIntoFile = v != 0
		case 9:
			cfg.FileWritePeriod = time.Duration(max(v, 100)) * time.Millisecond
		case 10:
			cfg.MaxFileSize = int64(min(v, 1<<62))
		case 13:
			cfg.FlushPeriod = time.Duration(v) * time.Millisecond
		case 14:
			cfg.FlushTimeout = time.Duration(v) * time.Millisecond
		case 12:
			// deferred_start: EnableTracing holds the session until
			// StartTracing (PerfettoConsumers.EnableTracing).
		case 17:
			tc, why := triggerConfigFromPerfetto(payload)
			if why != nil {
				bad = append(bad, why...)
			}
			cfg.TriggerConfig = tc
			if tc.Mode == TriggerModeClone {
				cloneLength = time.Duration(uint64Field(payload, 3)) * time.Millisecond
			}
		case 18:
			// activate_triggers: traced's service does not act on it
			// (the perfetto command sends these names itself, as a
			// producer); kept for the warning (perfettoWarnings).
			cfg.perfettoActivateTriggers = append(cfg.perfettoActivateTriggers, string(payload))
		case 21:
			if p := uint64Field(payload, 1); p > 0 {
				cfg.IncrementalState.ClearPeriod = time.Duration(max(p, 100)) * time.Millisecond
			}
		case 22:
			// unique_session_name: EnableTracing keeps it for
			// CloneSession and QueryServiceState.
		default:
			// What the perfetto command adds on the wire, and settings
			// with no effect here, are accepted (perfetto_fields.go).
			if f := traceConfigField("", num); f != nil && f.support == fieldIgnored {
				return nil
			}
			bad = append(bad, traceConfigFieldName("", num))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("trace_config: %w", err)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("trace_config: not supported by tracepipe: %s", strings.Join(bad, ", "))
	}
	if cloneLength > 0 {
		// traced ends a CLONE_SNAPSHOT session trigger_timeout_ms after
		// it started: the timeout becomes its duration (a trace with
		// triggers sets no duration_ms of its own there).
		cfg.Duration = cloneLength
	}
	if cfg.FileWritePeriod == 0 && cfg.WriteIntoFile {
		cfg.FileWritePeriod = 5 * time.Second
	}
	// The consumer is the session's sink (Options.Sinks); this entry only
	// satisfies validation and is never opened.
	cfg.Sinks = []sinks.Config{{Type: "file", Path: "perfetto-consumer.pftrace"}}
	if err := cfg.Validate(); err != nil {
		if len(cfg.perfettoActivateTriggers) > 0 {
			// A config that only names triggers to activate, as
			// perfetto_cmd reads one: it was meant for a producer.
			return nil, fmt.Errorf("trace_config: %w (%s)", err, activateTriggersNote)
		}
		return nil, fmt.Errorf("trace_config: %w", err)
	}
	return cfg, nil
}

// activateTriggersNote says what becomes of TraceConfig.activate_triggers.
const activateTriggersNote = "activate_triggers is not acted on by the service, as traced's is not: " +
	"the perfetto command sends those names itself, connected to the producer socket " +
	"(ActivateTriggers, as `perfetto --trigger NAME` does)"

// TraceConfigWarnings are the config's warnings (Warnings) in the words
// of a Perfetto TraceConfig (fill_policy DISCARD), for a session that
// came from one (ConfigFromTraceConfig).
func (c *Config) TraceConfigWarnings() []string { return c.WarningsSpelling("DISCARD") }

// maxWarnedTriggers bounds the names one warning lists.
const maxWarnedTriggers = 8

// perfettoWarnings are the warnings of a session config that came from a
// Perfetto TraceConfig (Config.WarningsSpelling): activate_triggers is accepted,
// as traced accepts it, and does nothing.
func (c *Config) perfettoWarnings() []string {
	names := c.perfettoActivateTriggers
	if len(names) == 0 {
		return nil
	}
	more := ""
	if len(names) > maxWarnedTriggers {
		more = fmt.Sprintf(" and %d more", len(names)-maxWarnedTriggers)
		names = names[:maxWarnedTriggers]
	}
	return []string{fmt.Sprintf("activate_triggers: %q%s not activated; %s. The session runs as the rest of its config says",
		names, more, activateTriggersNote)}
}

// triggerConfigFromPerfetto maps TraceConfig.trigger_config onto the
// session's trigger engine (pipeline/triggers.go): START_TRACING, STOP_TRACING and
// CLONE_SNAPSHOT (the consumer is told, TYPE_CLONE_TRIGGER_HIT, and
// clones) with their triggers (name, producer_name_regex, stop_delay_ms,
// max_per_24_h, skip_probability) and trigger_timeout_ms. It returns what
// it cannot map, by field name (use_clone_snapshot_if_available).
func triggerConfigFromPerfetto(b []byte) (*TriggerConfig, []string) {
	tc := &TriggerConfig{}
	var bad []string
	err := walkProto(b, func(n protowire.Number, v uint64, p []byte) error {
		switch n {
		case 1:
			switch v {
			case 1:
				tc.Mode = TriggerModeStart
			case 2:
				tc.Mode = TriggerModeStop
			case 4:
				tc.Mode = TriggerModeClone
			default:
				bad = append(bad, fmt.Sprintf("trigger_config.trigger_mode %d", v))
			}
		case 2:
			i := len(tc.Triggers)
			var sp TriggerSpec
			err := walkProto(p, func(n protowire.Number, v uint64, p []byte) error {
				switch n {
				case 1:
					sp.Name = string(p)
				case 2:
					sp.ProducerNameRegex = string(p)
				case 3:
					sp.StopDelay = time.Duration(v) * time.Millisecond
				case 4:
					sp.MaxPer24h = uint32(min(v, 1<<31))
				case 5:
					sp.SkipProbability = math.Float64frombits(v)
				default:
					bad = append(bad, fmt.Sprintf("trigger_config.triggers[%d].%s", i, traceConfigFieldName("trigger_config.triggers[]", n)))
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("triggers[%d]: %w", i, err)
			}
			tc.Triggers = append(tc.Triggers, sp)
		case 3:
			tc.Timeout = time.Duration(v) * time.Millisecond
		case 5:
			if v != 0 {
				bad = append(bad, "trigger_config.use_clone_snapshot_if_available")
			}
		default:
			bad = append(bad, "trigger_config."+traceConfigFieldName("trigger_config", n))
		}
		return nil
	})
	if err != nil {
		bad = append(bad, fmt.Sprintf("trigger_config (%v)", err))
	}
	if tc.Mode == TriggerModeClone {
		tc.Timeout = 0 // ConfigFromTraceConfig makes it the session's duration; clones are the consumer's
	}
	return tc, bad
}

// walkProto calls fn for each field of b (internal/wire's walk; fn gets
// the varint or fixed value, or the payload of a length-delimited field).
func walkProto(b []byte, fn func(num protowire.Number, v uint64, payload []byte) error) error {
	return wire.Walk(b, func(f wire.Field) error { return fn(f.Num, f.Varint, f.Bytes) })
}

func stringField(b []byte, num protowire.Number) string {
	var s string
	_ = walkProto(b, func(n protowire.Number, _ uint64, p []byte) error {
		if n == num {
			s = string(p)
		}
		return nil
	})
	return s
}

func uint64Field(b []byte, num protowire.Number) uint64 {
	var x uint64
	_ = walkProto(b, func(n protowire.Number, v uint64, _ []byte) error {
		if n == num {
			x = v
		}
		return nil
	})
	return x
}

// AdmitsProducer says whether the data source's producer_name_filter and
// producer_name_regex_filter admit a producer of that name (with
// neither, every one).
func (dc *DataSourceConfig) AdmitsProducer(name string) bool {
	return dc.PerfettoProducers.Admits(name)
}

// RawPerfettoConfig is the serialized DataSourceConfig passed on to
// Perfetto producers: the one a Perfetto consumer sent, or PerfettoConfig
// encoded by Validate (nil: none).
func (dc *DataSourceConfig) RawPerfettoConfig() []byte { return dc.EncodedPerfettoConfig }
