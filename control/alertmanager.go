package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Prometheus Alertmanager's webhook (webhook_config): a POST whose JSON
// body carries the alerts of one notification. Each firing alert becomes
// one trigger: its label tracepipe_trigger when set, else its alertname.
// So an alert can take a snapshot of the last minutes of trace. Resolved
// alerts are ignored. The body comes from the network: it is bounded,
// decoded strictly enough to find the names, and every name is checked
// like any other trigger name.

// MaxAlertBody bounds a webhook request body.
const MaxAlertBody = 1 << 20

// AlertTriggerLabel overrides the trigger name of an alert.
const AlertTriggerLabel = "tracepipe_trigger"

type alertNotification struct {
	Version string  `json:"version"`
	Status  string  `json:"status"`
	Alerts  []alert `json:"alerts"`
}

type alert struct {
	Status string            `json:"status"`
	Labels map[string]string `json:"labels"`
}

// AlertTriggers decodes an Alertmanager webhook body and returns the
// trigger names of its firing alerts, deduplicated, in order.
func AlertTriggers(body []byte) ([]string, error) {
	var n alertNotification
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, fmt.Errorf("alertmanager webhook: %w", err)
	}
	if n.Version != "" && n.Version != "4" {
		return nil, fmt.Errorf("alertmanager webhook: version %q; want 4", n.Version)
	}
	var out []string
	seen := map[string]bool{}
	for i, a := range n.Alerts {
		if a.Status != "" && a.Status != "firing" {
			continue
		}
		name := a.Labels[AlertTriggerLabel]
		if name == "" {
			name = a.Labels["alertname"]
		}
		if err := ValidName("trigger", name); err != nil {
			return nil, fmt.Errorf("alertmanager webhook: alerts[%d]: %w", i, err)
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
		if len(out) > MaxTriggers {
			return nil, fmt.Errorf("alertmanager webhook: more than %d distinct triggers", MaxTriggers)
		}
	}
	return out, nil
}

// AlertOptions configure AlertHandler.
type AlertOptions struct {
	// Token, when set, is the bearer token every request must carry.
	Token string
	// Refused is called for every request refused before its triggers
	// reach the session (bad token, method, type or body), with the
	// peer's address and why.
	Refused func(peer string, status int, why error)
}

// AlertHandler serves the webhook: POST a notification; the triggers go to
// activate, which returns those that acted. The reply is JSON
// {"acted": [...], "ignored": n}. A request without the token (when one
// is set) gets 401 and activates nothing.
func AlertHandler(activate func(names []string) []string, opts AlertOptions) http.Handler {
	refuse := func(w http.ResponseWriter, r *http.Request, status int, why error) {
		if opts.Refused != nil {
			opts.Refused(r.RemoteAddr, status, why)
		}
		http.Error(w, why.Error(), status)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkBearer(r, opts.Token); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tracepipe alertmanager"`)
			refuse(w, r, http.StatusUnauthorized, err)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			refuse(w, r, http.StatusMethodNotAllowed, errors.New("POST an Alertmanager webhook notification"))
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
			refuse(w, r, http.StatusUnsupportedMediaType, errors.New("want Content-Type application/json"))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxAlertBody))
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", MaxAlertBody))
			return
		}
		if err != nil {
			refuse(w, r, http.StatusBadRequest, err)
			return
		}
		names, err := AlertTriggers(body)
		if err != nil {
			refuse(w, r, http.StatusBadRequest, err)
			return
		}
		acted := activate(names)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"acted": acted, "ignored": len(names) - len(acted)})
	})
}
