package control

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// The webhook's security: the receiver listens only where asked, on
// loopback unless an address names a host, and with a token file every
// request must carry "Authorization: Bearer <token>". A request refused
// for either reason never reaches the session; it is counted and logged
// (AlertOptions.Refused).

// MaxAlertTokenFile bounds a bearer token file.
const MaxAlertTokenFile = 4 << 10

// AlertListenAddr resolves --alert-addr: an address without a host
// (":9466") listens on loopback, not on every interface; to listen
// elsewhere, name the host ("0.0.0.0:9466").
func AlertListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--alert-addr %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// ReadAlertToken reads a bearer token file: its content without
// surrounding white space, at most MaxAlertTokenFile bytes, not empty.
func ReadAlertToken(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", fmt.Errorf("--alert-token-file: %w", err)
	}
	defer f.Close()
	buf := make([]byte, MaxAlertTokenFile+1)
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return "", fmt.Errorf("--alert-token-file %s: %w", name, err)
	}
	if n > MaxAlertTokenFile {
		return "", fmt.Errorf("--alert-token-file %s: over %d bytes", name, MaxAlertTokenFile)
	}
	tok := strings.TrimSpace(string(buf[:n]))
	if tok == "" {
		return "", fmt.Errorf("--alert-token-file %s: empty", name)
	}
	return tok, nil
}

// errUnauthorized is a request without the configured bearer token.
var errUnauthorized = errors.New("missing or wrong bearer token")

// checkBearer compares the request's bearer token with want in constant
// time (both hashed first, so not even the length leaks).
func checkBearer(r *http.Request, want string) error {
	if want == "" {
		return nil
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	if subtle.ConstantTimeCompare(g[:], w[:]) != 1 || !ok {
		return errUnauthorized
	}
	return nil
}
