package config

import (
	"fmt"
	"regexp"
	"time"

	"github.com/tracepipe/tracepipe/internal/names"
)

// Trigger modes (trigger_config.trigger_mode).
const (
	TriggerModeStart = "start_tracing"
	TriggerModeStop  = "stop_tracing"
	TriggerModeClone = "clone_snapshot"
)

// TriggerConfig is Perfetto's TraceConfig.TriggerConfig.
type TriggerConfig struct {
	Mode     string        `koanf:"trigger_mode"`
	Triggers []TriggerSpec `koanf:"triggers"`
	Timeout  time.Duration `koanf:"trigger_timeout"` // start_tracing / stop_tracing: required
}

// TriggerSpec is one TriggerConfig.Trigger.
type TriggerSpec struct {
	Name              string        `koanf:"name"`
	ProducerNameRegex string        `koanf:"producer_name_regex"` // "" = any producer
	StopDelay         time.Duration `koanf:"stop_delay"`
	MaxPer24h         uint32        `koanf:"max_per_24h"`      // 0 = unlimited
	SkipProbability   float64       `koanf:"skip_probability"` // 0..1
}

// MinRotatePeriod is the shortest rotate_period.
const MinRotatePeriod = time.Second

func (c *Config) checkTriggers(k *checker) {
	if c.UniqueSessionName != "" {
		if err := names.Valid("session", c.UniqueSessionName); err != nil {
			k.bad("unique_session_name", "%v", err)
		}
	}
	if c.RotatePeriod < 0 || c.RotatePeriod > 0 && c.RotatePeriod < MinRotatePeriod {
		k.bad("rotate_period", "must be 0 (never) or >= %v, got %v", MinRotatePeriod, c.RotatePeriod)
	}
	tc := c.TriggerConfig
	if tc == nil {
		return
	}
	switch tc.Mode {
	case TriggerModeStart, TriggerModeStop:
		if tc.Timeout <= 0 || tc.Timeout > MaxDuration {
			k.bad("trigger_config.trigger_timeout", "required with trigger_mode %s: > 0 and <= 7 days, got %v", tc.Mode, tc.Timeout)
		}
	case TriggerModeClone:
		if tc.Timeout != 0 {
			k.bad("trigger_config.trigger_timeout", "not used with trigger_mode clone_snapshot (the session runs for its duration); remove it")
		}
	case "":
		k.bad("trigger_config.trigger_mode", "required: start_tracing, stop_tracing or clone_snapshot")
	default:
		k.bad("trigger_config.trigger_mode", "%q: want start_tracing, stop_tracing or clone_snapshot", tc.Mode)
	}
	if len(tc.Triggers) == 0 {
		k.bad("trigger_config.triggers", "at least one trigger is required")
	}
	seen := map[string]bool{}
	for i, t := range tc.Triggers {
		p := fmt.Sprintf("trigger_config.triggers[%d]", i)
		if err := names.Valid("trigger", t.Name); err != nil {
			k.bad(p+".name", "%v", err)
		} else if seen[t.Name] {
			k.bad(p+".name", "%q is defined twice", t.Name)
		}
		seen[t.Name] = true
		if n := len(t.ProducerNameRegex); n > MaxRegexLen {
			k.bad(p+".producer_name_regex", "%d bytes, at most %d", n, MaxRegexLen)
		} else if t.ProducerNameRegex != "" {
			if _, err := regexp.Compile(t.ProducerNameRegex); err != nil {
				k.bad(p+".producer_name_regex", "%v", err)
			}
		}
		if t.StopDelay < 0 || t.StopDelay > MaxDuration {
			k.bad(p+".stop_delay", "must be >= 0 and <= 7 days, got %v", t.StopDelay)
		}
		if !(t.SkipProbability >= 0 && t.SkipProbability <= 1) {
			k.bad(p+".skip_probability", "must be between 0 and 1, got %v", t.SkipProbability)
		}
	}
}
