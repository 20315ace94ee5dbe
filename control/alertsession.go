package control

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/tracepipe/tracepipe/control/ctlapi"
	"github.com/tracepipe/tracepipe/internal/logdetail"
)

// AlertSource is the producer name the webhook's trigger activations and
// refusals are recorded under.
const AlertSource = "alertmanager"

// AlertSession is the session the Alertmanager webhook drives (package
// ctlapi).
type AlertSession = ctlapi.AlertSession

// SessionAlertHandler is AlertHandler for a session: each notification's
// triggers are activated as AlertSource, the names that did not act are
// reported back to s, every notification is logged on log (nil: not
// logged), and refused requests go to s.AlertRequestRefused. token, when
// set, is the bearer token every request must carry.
func SessionAlertHandler(s AlertSession, token string, log *slog.Logger) http.Handler {
	return AlertHandler(func(names []string) []string {
		acted := s.ActivateTriggers(AlertSource, names...)
		logdetail.Log(log, slog.LevelInfo, []any{"triggers", names, "acted", acted}, "alertmanager: triggers %v, acted %v", names, acted)
		if len(acted) < len(names) {
			s.TriggersRefused(AlertSource, slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(acted, n) }))
		}
		return acted
	}, AlertOptions{Token: token, Refused: s.AlertRequestRefused})
}

// Bounds of the webhook's HTTP server: a peer that trickles its request,
// or never reads the reply, holds a connection this long at most.
const (
	alertReadHeaderTimeout = 5 * time.Second
	alertReadTimeout       = 10 * time.Second
	alertWriteTimeout      = 10 * time.Second
	alertIdleTimeout       = 30 * time.Second
	alertMaxHeaderBytes    = 64 << 10
	// AlertShutdownTimeout bounds the stop ServeAlerts returns: requests
	// still running after it are cut.
	AlertShutdownTimeout = 2 * time.Second
)

// ServeAlerts serves h at /alertmanager on ln (every other path is 404)
// with bounded reads, writes and idle connections, until the returned
// stop is called; stop returns within AlertShutdownTimeout. The caller
// chooses the address (AlertListenAddr keeps it on loopback unless told
// otherwise) and owns the wording of errors about it.
func ServeAlerts(ln net.Listener, h http.Handler) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("/alertmanager", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: alertReadHeaderTimeout, ReadTimeout: alertReadTimeout,
		WriteTimeout: alertWriteTimeout, IdleTimeout: alertIdleTimeout, MaxHeaderBytes: alertMaxHeaderBytes}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), AlertShutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}
