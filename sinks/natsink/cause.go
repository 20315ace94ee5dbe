package natsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracepipe/tracepipe/sinks"
)

// cause turns a connection or publish error into the sentence a user
// needs. Causes retrying will not cure (no stream listens on the subject,
// authentication or permissions refused, a TLS mismatch) are marked
// sinks.Permanent, so the sink fails at once (it keeps trying: a stream
// created later is used); a refused connection is an outage. It returns
// nil for errors that only say the connection is down (the cause is
// what took it down).
func cause(err error, subject string, ackTimeout string) error {
	switch {
	case err == nil:
		return errors.New("connection lost")
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrNoServers),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrReconnectBufExceeded):
		return nil // a consequence: the connection's handlers know the cause
	case errors.Is(err, io.EOF):
		return fmt.Errorf("the server closed the connection: %w", err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return err // "dial tcp …: connect: connection refused" says it
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return sinks.Permanent(fmt.Errorf("no JetStream stream listens on subject %q (create one, or set create_stream: true): %w", subject, err))
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return sinks.Permanent(fmt.Errorf("JetStream is not enabled on the server (start nats-server with -js): %w", err))
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return sinks.Permanent(fmt.Errorf("authentication refused by the server (credentials?): %w", err))
	case errors.Is(err, nats.ErrPermissionViolation):
		return sinks.Permanent(fmt.Errorf("not permitted to publish to %q: %w", subject, err))
	case errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return sinks.Permanent(fmt.Errorf("TLS mismatch: %w", err))
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return fmt.Errorf("no acknowledgement within ack_timeout %s: %w", ackTimeout, err)
	}
	return err
}
