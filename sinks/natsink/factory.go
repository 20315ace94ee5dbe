package natsink

import (
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// SinkType is the `type` of a nats sink.
const SinkType = "nats"

func init() { sinks.Register(SinkType, factory) }

type builder struct{ opts Options }

// factory decodes sinks[i].nats:
//
//	url            required: nats://host:4222 (comma-separated for a cluster)
//	subject        required: the subject batches are published to
//	stream         stream to create (default TRACEPIPE)
//	create_stream  create the stream (file storage) if none listens on subject
//	machine_id     this host's id (default: hash of /etc/machine-id)
//	hostname       default: os.Hostname
//	batch_size     bytes per message (default 256KiB; at most the server's max_payload)
//	max_batches    unacknowledged batches kept (default 64); beyond, packets are dropped and counted
//	max_inflight   publishes awaiting their ack (default 16)
//	ack_timeout    publish ack timeout (default 5s)
//	backoff_min    first retry delay (default 50ms), doubled per failure, ±50 % jitter
//	backoff_max    longest retry delay (default 5s)
//	close_timeout  how long the end of a session waits for acknowledgements (default 5s)
//	first_contact_timeout  how long JetStream may be unreachable before it ever
//	               acknowledged; then the sink fails, on_error applies (default 10s)
func factory(m map[string]any) (sinks.Builder, error) {
	sec := sinks.NewSection(m)
	var o Options
	o.URL = sec.String("url", "")
	o.Subject = sec.String("subject", "")
	o.Stream = sec.String("stream", DefaultStream)
	o.CreateStream = sec.Bool("create_stream", false)
	o.Identity.Machine = uint64(sec.Int("machine_id", 0))
	o.Identity.Hostname = sec.String("hostname", "")
	o.BatchBytes = int(sec.ByteSize("batch_size", remote.DefaultBatchBytes))
	o.MaxBatches = int(sec.Int("max_batches", remote.DefaultMaxBatches))
	o.MaxInflight = int(sec.Int("max_inflight", DefaultMaxInflight))
	o.AckTimeout = sec.Duration("ack_timeout", DefaultAckTimeout)
	o.BackoffMin = sec.Duration("backoff_min", DefaultBackoffMin)
	o.BackoffMax = sec.Duration("backoff_max", DefaultBackoffMax)
	o.CloseTimeout = sec.Duration("close_timeout", DefaultCloseTimeout)
	o.FirstContactTimeout = sec.Duration("first_contact_timeout", sinks.DefaultFirstContactTimeout)
	if o.URL == "" {
		sec.Bad("url", "required for a nats sink, e.g. nats://127.0.0.1:4222")
	}
	if o.Subject == "" {
		sec.Bad("subject", "required for a nats sink")
	}
	if o.BatchBytes < 0 || o.BatchBytes > remote.MaxBatchData {
		sec.Bad("batch_size", "%d is out of range (0 = default, at most %d)", o.BatchBytes, remote.MaxBatchData)
	}
	if o.MaxBatches < 0 || o.MaxBatches > 1<<16 {
		sec.Bad("max_batches", "%d is out of range (0 = default, at most 65536)", o.MaxBatches)
	}
	if o.MaxInflight < 0 || o.MaxInflight > 4096 {
		sec.Bad("max_inflight", "%d is out of range (0 = default, at most 4096)", o.MaxInflight)
	}
	for key, d := range map[string]time.Duration{"ack_timeout": o.AckTimeout, "backoff_min": o.BackoffMin, "backoff_max": o.BackoffMax, "close_timeout": o.CloseTimeout, "first_contact_timeout": o.FirstContactTimeout} {
		if d < 0 {
			sec.Bad(key, "%v is negative", d)
		}
	}
	if err := sec.Err(); err != nil {
		return nil, err
	}
	return &builder{opts: o}, nil
}

func (b *builder) Destination() string { return b.opts.URL + " " + b.opts.Subject }

// Open connects; the session uuid becomes the batches' session id.
func (b *builder) Open(env sinks.Env) (sinks.Sink, error) {
	o := b.opts
	id := remote.NewIdentity(o.Identity.Machine, o.Identity.Hostname)
	if env.SessionUUID != ([16]byte{}) {
		id.Session = env.SessionUUID
	}
	id.Snapshot = env.Snapshot
	o.Identity = id
	o.Logger = env.Logger
	return New(o)
}
