package relay

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/tracepipe/tracepipe/sinks"
)

// errRefused is a receiver's error frame answering the hello.
var errRefused = errors.New("receiver refused the session")

// handshakeError is a failed TLS dial (connect and handshake).
type handshakeError struct{ err error }

func (e handshakeError) Error() string { return e.err.Error() }
func (e handshakeError) Unwrap() error { return e.err }

// cause turns a failed connection attempt into the sentence a user needs:
// what went wrong, in terms of the configuration. Causes retrying cannot
// cure (a TLS mismatch, an untrusted certificate, a receiver that refused
// does not speak the relay protocol) are marked sinks.Permanent, so the
// sink fails at once; a refused or reset connection, or a receiver that
// refuses the session (it may be at a limit), is an outage, which fails
// the sink only once it costs packets.
func cause(err error, helloed, tlsOn bool) error {
	var rec tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var op *net.OpError
	var hs handshakeError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return err // "dial tcp …: connect: connection refused" says it
	case errors.As(err, &rec):
		return sinks.Permanent(fmt.Errorf("TLS mismatch: the receiver does not answer TLS (is `tracepipe serve` running without --tls-cert?): %w", err))
	case errors.As(err, &unknownCA), errors.As(err, &host), errors.As(err, &invalid), errors.As(err, &verify):
		return sinks.Permanent(fmt.Errorf("TLS: the receiver's certificate is not trusted (check tls.ca_file, tls.server_name): %w", err))
	case errors.As(err, &alert), errors.As(err, &op) && op.Op == "remote error":
		return sinks.Permanent(fmt.Errorf("TLS handshake refused by the receiver (client certificate?): %w", err))
	case errors.As(err, &hs) && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return fmt.Errorf("TLS handshake failed: the receiver closed the connection (TLS mismatch: is `tracepipe serve` running without --tls-cert?): %w", err)
	case errors.Is(err, io.EOF) && helloed:
		return fmt.Errorf("the receiver closed the connection: %w", err)
	case errors.Is(err, io.EOF) && !tlsOn:
		return fmt.Errorf("the receiver closed the connection before answering the hello (one that requires TLS does so): %w", err)
	case errors.Is(err, ErrProtocol) && !tlsOn:
		return sinks.Permanent(fmt.Errorf("the receiver does not speak the relay protocol (TLS mismatch: does it require TLS?): %w", err))
	case errors.Is(err, ErrProtocol):
		return sinks.Permanent(fmt.Errorf("the receiver does not speak the relay protocol: %w", err))
	}
	return err
}
