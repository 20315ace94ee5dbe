package plugins

// TriggerHost is implemented by the Host tracepipe gives every data
// source, in process and in a plugin: ActivateTriggers activates triggers
// of the session's trigger_config (Perfetto's ActivateTriggers), checked
// against each trigger's producer_name_regex with the data source's name.
// It never blocks; a trigger the session does not know, or that
// skip_probability or max_per_24h refuses, is counted there. A separate
// interface so that Host implementations elsewhere keep compiling.
type TriggerHost interface {
	ActivateTriggers(names ...string)
}

// ActivateTriggers activates triggers through h if h can; it reports
// whether it could.
func ActivateTriggers(h Host, names ...string) bool {
	th, ok := h.(TriggerHost)
	if ok {
		th.ActivateTriggers(names...)
	}
	return ok
}
