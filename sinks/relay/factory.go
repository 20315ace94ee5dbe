package relay

import (
	"fmt"
	"net"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// SinkType is the `type` of a relay sink.
const SinkType = "relay"

func init() { sinks.Register(SinkType, factory) }

// builder is a decoded `relay` section.
type builder struct {
	opts                      Options
	tls                       bool
	ca, cert, key, serverName string
}

// factory decodes sinks[i].relay:
//
//	address          required: host:port of `tracepipe serve`
//	machine_id       this host's id (default: hash of /etc/machine-id)
//	hostname         default: os.Hostname
//	batch_size       bytes per batch (default 256KiB)
//	max_batches      unacknowledged batches kept (default 64); beyond, packets are dropped and counted
//	backoff_min      first reconnect delay (default 50ms), doubled per failure, ±50 % jitter
//	backoff_max      longest reconnect delay (default 5s)
//	dial_timeout     connect + hello (default 5s)
//	first_contact_timeout  how long the receiver may be unreachable before it was
//	                 ever reached; then the sink fails, on_error applies (default 10s)
//	close_timeout    how long the end of a session waits for acknowledgements (default 5s)
//	clock_sync       false: no clock-sync rounds (default true; a merged trace then cannot align this machine)
//	clock_sync_period time between clock-sync rounds after the first (default 30s; at least 1s)
//	tls              true to use TLS (implied by any tls_* key)
//	tls_ca_file      CA verifying the receiver (default: system roots)
//	tls_cert_file    client certificate, with tls_key_file
//	tls_key_file
//	tls_server_name  name to verify instead of the address's host
func factory(m map[string]any) (sinks.Builder, error) {
	sec := sinks.NewSection(m)
	b := &builder{}
	o := &b.opts
	o.Address = sec.String("address", "")
	o.Identity.Machine = uint64(sec.Int("machine_id", 0))
	o.Identity.Hostname = sec.String("hostname", "")
	o.BatchBytes = int(sec.ByteSize("batch_size", remote.DefaultBatchBytes))
	o.MaxBatches = int(sec.Int("max_batches", remote.DefaultMaxBatches))
	o.BackoffMin = sec.Duration("backoff_min", DefaultBackoffMin)
	o.BackoffMax = sec.Duration("backoff_max", DefaultBackoffMax)
	o.DialTimeout = sec.Duration("dial_timeout", DefaultDialTimeout)
	o.CloseTimeout = sec.Duration("close_timeout", DefaultCloseTimeout)
	o.FirstContactTimeout = sec.Duration("first_contact_timeout", sinks.DefaultFirstContactTimeout)
	o.ClockSyncPeriod = sec.Duration("clock_sync_period", DefaultClockSyncPeriod)
	if !sec.Bool("clock_sync", true) {
		o.ClockSyncPeriod = -1
	} else if o.ClockSyncPeriod < time.Second {
		sec.Bad("clock_sync_period", "%v is below 1s (clock_sync: false turns rounds off)", o.ClockSyncPeriod)
	}
	b.tls = sec.Bool("tls", false)
	b.ca = sec.String("tls_ca_file", "")
	b.cert = sec.String("tls_cert_file", "")
	b.key = sec.String("tls_key_file", "")
	b.serverName = sec.String("tls_server_name", "")
	b.tls = b.tls || b.ca != "" || b.cert != "" || b.key != "" || b.serverName != ""
	if o.Address == "" {
		sec.Bad("address", "required for a relay sink (host:port of `tracepipe serve`)")
	} else if _, _, err := net.SplitHostPort(o.Address); err != nil {
		sec.Bad("address", "%v", err)
	}
	if o.BatchBytes < 0 || o.BatchBytes > remote.MaxBatchData {
		sec.Bad("batch_size", "%d is out of range (0 = default, at most %d)", o.BatchBytes, remote.MaxBatchData)
	}
	if o.MaxBatches < 0 || o.MaxBatches > 1<<16 {
		sec.Bad("max_batches", "%d is out of range (0 = default, at most 65536)", o.MaxBatches)
	}
	for key, d := range map[string]time.Duration{"backoff_min": o.BackoffMin, "backoff_max": o.BackoffMax, "dial_timeout": o.DialTimeout, "close_timeout": o.CloseTimeout, "first_contact_timeout": o.FirstContactTimeout} {
		if d < 0 {
			sec.Bad(key, "%v is negative", d)
		}
	}
	if (b.cert == "") != (b.key == "") {
		sec.Bad("tls_cert_file", "tls_cert_file and tls_key_file go together")
	}
	if err := sec.Err(); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *builder) Destination() string {
	scheme := "tcp"
	if b.tls {
		scheme = "tls"
	}
	return fmt.Sprintf("relay %s://%s", scheme, b.opts.Address)
}

// Open starts the sink; the session uuid becomes the relay session id.
func (b *builder) Open(env sinks.Env) (sinks.Sink, error) {
	o := b.opts
	if b.tls {
		cfg, err := ClientTLS(b.ca, b.cert, b.key, b.serverName)
		if err != nil {
			return nil, err
		}
		o.TLS = cfg
	}
	id := remote.NewIdentity(o.Identity.Machine, o.Identity.Hostname)
	if env.SessionUUID != ([16]byte{}) {
		id.Session = env.SessionUUID
	}
	id.Snapshot = env.Snapshot
	o.Identity = id
	o.Logger = env.Logger
	return New(o)
}
