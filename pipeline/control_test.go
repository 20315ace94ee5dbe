package pipeline

import (
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/control/ctlapi"
	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// controlTriggers: a stop_tracing session that a control client's trigger
// ends.
const controlTriggers = "trigger_config: {trigger_mode: stop_tracing, trigger_timeout: 20s, triggers: [{name: crash, stop_delay: 100ms}]}"

// TestControlHandlerServesTheSession: the control socket's adapter reports
// the session's name, start and buffers, names its triggers (so the socket
// refuses others), activates a trigger as a control client (its
// stop_tracing ends the session), and passes a stop request to the
// caller's stop.
func TestControlHandlerServesTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		stops := 0
		res, _, _ := triggerSession(t, controlTriggers, func(s *Service) {
			h := s.ControlHandler("ctl", start, func() { stops++ })
			testsupport.WaitUntil(t, "data", 10*time.Second, func() bool { return s.Status().BytesIn > 0 })
			in := h.Info()
			if in.Name != "ctl" || !in.Start.Equal(start) || len(in.Buffers) != 1 || in.Buffers[0].Size != 1024<<10 || in.BytesIn == 0 {
				t.Errorf("Info = %+v", in)
			}
			tn, ok := h.(ctlapi.TriggerNamer)
			if !ok || !reflect.DeepEqual(tn.TriggerNames(), []string{"crash"}) {
				t.Errorf("TriggerNamer %v", ok)
			}
			h.Stop()
			if stops != 1 {
				t.Errorf("Stop called stop %d times", stops)
			}
			if acted, ignored := h.Trigger([]string{"crash"}); !reflect.DeepEqual(acted, []string{"crash"}) || ignored != 0 {
				t.Errorf("Trigger: acted %v, ignored %d", acted, ignored)
			}
		})
		if res.TriggerTimedOut || res.Triggers.Acted != 1 {
			t.Errorf("the control trigger did not stop the session: %+v", res.Triggers)
		}
	})
}
