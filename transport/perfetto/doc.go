// Package perfetto is the Perfetto IPC producer transport: Producers is
// the perfettoipc.Backend of tracepipe's producer socket (SDK apps,
// traced_probes connect, register data sources, commit and answer
// commands there) and a pipeline.RemoteProducers, through which a session
// binds every connected producer that registered one of its data sources,
// at its start and, told by Changed, whenever one connects or registers
// while it records (late joiners, as traced).
// It owns the connections and what is shared on them (one SMB and one
// command stream per producer, serving any number of instances of any
// number of sessions): routing each commit's chunks by target buffer to
// the instance that owns the buffer, one flush command per session and
// producer, the setup/start/stop order traced keeps, and each instance's
// pipeline.Transport (perfettoSide).
//
// It lives below the consumer service (perfettosvc) and above the session
// core: it imports pipeline for the Transport contract and the exported
// session API, and pipeline does not import it (a session's client opens
// the socket with ListenForSession, listen.go, and wires it in through
// Options.Perfetto). It must not copy, validate or account chunks
// itself — commits reach the session as CommitData bytes through each
// instance's pipeline.Link, validated there as any producer's — nor hold
// a session's state beyond the ids traced gives out.
package perfetto
