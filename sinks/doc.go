// Package sinks owns where packets go after readback: the Sink interface,
// the streaming file sink (valid at every packet boundary, rotation,
// compression), packet filters written in CEL, and the bounded queues that
// keep a slow sink from ever blocking producers.
//
// A sink reports every packet it drops; it must never block the readback
// loop indefinitely and knows nothing of buffers or producers. A FileSink
// writes synchronously (its Write waits for the disk when its buffer
// fills); wrap it with Queued (Config.QueueCapacity) to take disk latency
// off the caller. Only the file sink is built; relay and NATS sinks are
// not.
package sinks
