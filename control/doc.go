// Package control is the control endpoint of a running tracepipe session:
// a gRPC service (control.proto, protocol version 1) on a UNIX socket,
// mode 0600, in Dir(), one socket per session named
// "<name>.<pid>.sock". Server serves a Handler (the session); List,
// Find and Dial are the client side used by `tracepipe sessions`,
// `trigger`, `snapshot`, `rotate` and `stop`.
//
// It owns the socket files (creation, stale-socket detection and
// replacement, unique session names, removal on Close) and the decoding
// and validation of requests, which come from other processes and are
// untrusted. It also owns Prometheus Alertmanager's webhook
// (alertmanager.go, alertauth.go, alertsession.go): decoding the
// notifications, the bearer token, loopback by default, a bounded HTTP
// server (ServeAlerts), and SessionAlertHandler, which drives a session
// through the small AlertSession interface. It must not know about
// buffers, sinks or the pipeline (it imports none of them): the session
// does the work, implementing the Handler and AlertSession of
// control/ctlapi, which this package re-exports. Neither config nor
// pipeline imports this package (names are checked by internal/names),
// so that a program without a control socket does not link gRPC.
package control
