package config

import (
	"os"
	"time"
)

// PerfettoConfig is the `perfetto:` section: tracepipe as a drop-in
// traced. With it enabled, programs built for Perfetto (SDK apps,
// traced_probes) connect to the producer socket, and a data_sources[i]
// whose name is neither built in nor a plugin's is served by every
// connected Perfetto producer that registered that name.
type PerfettoConfig struct {
	Enabled bool `koanf:"enabled"`
	// ProducerSocket is the socket path; default: PERFETTO_PRODUCER_SOCK_NAME,
	// else Perfetto's default (PerfettoProducerSocket).
	ProducerSocket string `koanf:"producer_socket"`
	// WaitForProducers bounds how long `tracepipe run` waits, before the
	// session starts, for the Perfetto data sources the config names to be
	// registered (default 5s; producers retry connecting every second or so).
	WaitForProducers time.Duration `koanf:"wait_for_producers"`
	// MaxConnections bounds the producer socket's connections (default
	// 256); MaxConnectionsPerUID those of one peer uid (default a quarter
	// of MaxConnections), so one local user cannot take every slot.
	MaxConnections       int `koanf:"max_connections"`
	MaxConnectionsPerUID int `koanf:"max_connections_per_uid"`
	// InitTimeout closes a producer connection that has not sent
	// InitializeConnection this long after it connected (default 10s).
	InitTimeout time.Duration `koanf:"init_timeout"`
}

// check validates the perfetto: section's bounds.
func (c PerfettoConfig) check(k *checker) {
	if c.MaxConnections < 0 {
		k.bad("perfetto.max_connections", "must be >= 0 (0: 256), got %d", c.MaxConnections)
	}
	if c.MaxConnectionsPerUID < 0 {
		k.bad("perfetto.max_connections_per_uid", "must be >= 0 (0: a quarter of max_connections), got %d", c.MaxConnectionsPerUID)
	}
	if c.InitTimeout < 0 || c.InitTimeout > time.Hour {
		k.bad("perfetto.init_timeout", "must be >= 0 (0: 10s) and <= 1h, got %v", c.InitTimeout)
	}
}

// PerfettoProducerSocket is where Perfetto's producers connect by
// default (reference/ipc.md §1): PERFETTO_PRODUCER_SOCK_NAME, else
// /run/perfetto/traced-producer.sock when /run/perfetto is usable, else
// /tmp/perfetto-producer.
func PerfettoProducerSocket() string {
	if s := os.Getenv("PERFETTO_PRODUCER_SOCK_NAME"); s != "" {
		return s
	}
	if fi, err := os.Stat("/run/perfetto"); err == nil && fi.IsDir() && dirWritable("/run/perfetto") {
		return "/run/perfetto/traced-producer.sock"
	}
	return "/tmp/perfetto-producer"
}

func dirWritable(dir string) bool {
	f, err := os.CreateTemp(dir, ".tracepipe-probe-*")
	if err != nil {
		return false
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	return true
}

// PerfettoConsumerSocket is where Perfetto's consumers (the perfetto
// command) connect by default: PERFETTO_CONSUMER_SOCK_NAME, else
// /run/perfetto/traced-consumer.sock when /run/perfetto is usable, else
// /tmp/perfetto-consumer.
func PerfettoConsumerSocket() string {
	if s := os.Getenv("PERFETTO_CONSUMER_SOCK_NAME"); s != "" {
		return s
	}
	if fi, err := os.Stat("/run/perfetto"); err == nil && fi.IsDir() && dirWritable("/run/perfetto") {
		return "/run/perfetto/traced-consumer.sock"
	}
	return "/tmp/perfetto-consumer"
}

// ProducerSocketPath is the configured producer socket or the default.
func (c PerfettoConfig) ProducerSocketPath() string {
	if c.ProducerSocket != "" {
		return c.ProducerSocket
	}
	return PerfettoProducerSocket()
}

// Wait is WaitForProducers with its default.
func (c PerfettoConfig) Wait() time.Duration {
	if c.WaitForProducers > 0 {
		return c.WaitForProducers
	}
	return 5 * time.Second
}
