package builtin

import (
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/plugins"
)

// The synthetic source's trigger option, for flight-recorder examples and
// tests: `trigger: NAME` activates the trigger once through the Host
// (plugins.TriggerHost), when writer 0 has written
// `trigger_after_packets` TrackEvent packets, or `trigger_after_ms`
// after Start, whichever comes first (neither: at the first packet).
// `trigger_every_ms` repeats it.

// syntheticTrigger is the parsed option.
type syntheticTrigger struct {
	name         string
	afterPackets int64
	after, every time.Duration
}

// stringKey returns the string under key, or def when absent.
func (r *configReader) stringKey(key, def string) string {
	v, ok := r.lookup(key)
	if !ok {
		return def
	}
	s, isString := v.(string)
	if !isString || s == "" {
		r.addf(key, "must be a non-empty string, got %s", describe(v))
		return def
	}
	return s
}

func readSyntheticTrigger(r *configReader) syntheticTrigger {
	return syntheticTrigger{
		name:         r.stringKey("trigger", ""),
		afterPackets: r.intKey("trigger_after_packets", 0, atLeast(0)),
		after:        time.Duration(r.intKey("trigger_after_ms", 0, atLeast(0))) * time.Millisecond,
		every:        time.Duration(r.intKey("trigger_every_ms", 0, atLeast(0))) * time.Millisecond,
	}
}

// triggerFirer fires the configured trigger from the writer goroutines
// (packet count) or a timer, once per period.
type triggerFirer struct {
	cfg   syntheticTrigger
	h     plugins.Host
	fired atomic.Bool
	timer *time.Timer
	stop  chan struct{}
}

func newTriggerFirer(cfg syntheticTrigger, h plugins.Host) *triggerFirer {
	if cfg.name == "" {
		return nil
	}
	f := &triggerFirer{cfg: cfg, h: h, stop: make(chan struct{})}
	if cfg.after > 0 || cfg.afterPackets == 0 {
		f.timer = time.AfterFunc(cfg.after, f.fire)
	}
	return f
}

// packet is called by writer 0 after each TrackEvent packet.
func (f *triggerFirer) packet(n uint64) {
	if f != nil && f.cfg.afterPackets > 0 && n == uint64(f.cfg.afterPackets) {
		f.fire()
	}
}

func (f *triggerFirer) fire() {
	if !f.fired.CompareAndSwap(false, true) {
		return
	}
	plugins.ActivateTriggers(f.h, f.cfg.name)
	if f.cfg.every > 0 {
		go func() {
			t := time.NewTicker(f.cfg.every)
			defer t.Stop()
			for {
				select {
				case <-f.stop:
					return
				case <-t.C:
					plugins.ActivateTriggers(f.h, f.cfg.name)
				}
			}
		}()
	}
}

func (f *triggerFirer) close() {
	if f == nil {
		return
	}
	if f.timer != nil {
		f.timer.Stop()
	}
	f.fired.Store(true)
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
}
