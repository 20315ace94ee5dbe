package producer

// ActivateTriggers implements plugins.TriggerHost: the names go to the
// transport (Config.OnTriggers); without one they are dropped.
func (r *Runtime) ActivateTriggers(names ...string) {
	if r.onTriggers != nil && len(names) > 0 {
		r.onTriggers(append([]string(nil), names...))
	}
}
