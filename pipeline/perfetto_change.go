package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/wire"
)

// ChangeTraceConfig for Perfetto consumers, as traced supports it: only
// data_sources[].producer_name_filter may change in a running session.
// The connected producers that registered a data source and that the new
// filter admits start serving it at once; those it no longer admits go on
// (traced does not stop them either).

// errOnlyProducerFilter refuses any other change, naming the rule.
var errOnlyProducerFilter = errors.New("ChangeTraceConfig: only data_sources[].producer_name_filter may change in a running session (as in traced)")

// ChangeTraceConfig implements perfettoipc.ConsumerSession.
func (cs *consumerSession) ChangeTraceConfig(tc []byte) error {
	if !cs.isStarted() {
		return errNotStarted
	}
	newCfg, err := ConfigFromTraceConfig(tc)
	if err != nil {
		return err
	}
	a, err := withoutProducerFilters(tc)
	if err != nil {
		return err
	}
	b, err := withoutProducerFilters(cs.traceConfig)
	if err != nil {
		return err
	}
	if !bytes.Equal(a, b) {
		return errOnlyProducerFilter
	}
	// The session's data sources are those of the config some producer
	// served at EnableTracing: matched by name and config.
	filters := map[int]producerFilter{}
	for i, dc := range cs.svc.cfg.DataSources {
		for _, nd := range newCfg.DataSources {
			if nd.Name == dc.Name && bytes.Equal(nd.perfettoConfig, dc.perfettoConfig) {
				filters[i] = nd.perfettoProducers
				break
			}
		}
	}
	return cs.svc.changeProducerFilters(context.Background(), filters)
}

// withoutProducerFilters re-encodes a TraceConfig without the
// producer_name_filter (2) and producer_name_regex_filter (3) of its
// data_sources (2): what must not change.
func withoutProducerFilters(tc []byte) ([]byte, error) {
	var out []byte
	it := wire.Fields(tc)
	for it.Next() {
		f := it.Field()
		if f.Num != 2 || f.Type != protowire.BytesType {
			out = append(out, f.Raw(tc)...)
			continue
		}
		var ds []byte
		inner := wire.Fields(f.Bytes)
		for inner.Next() {
			g := inner.Field()
			if g.Num != 2 && g.Num != 3 { // producer_name_filter, producer_name_regex_filter
				ds = append(ds, g.Raw(f.Bytes)...)
			}
		}
		if err := inner.Err(); err != nil {
			return nil, fmt.Errorf("trace_config.data_sources: %w", err)
		}
		out = wire.AppendBytes(out, 2, ds)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("trace_config: %w", err)
	}
	return out, nil
}

// changeProducerFilters applies new producer_name_filters (by
// data_sources index) on the service goroutine and starts the producers
// they admit that do not serve the data source yet.
func (s *Service) changeProducerFilters(ctx context.Context, filters map[int]producerFilter) error {
	errc := make(chan error, 1)
	if err := s.onLoop(ctx, loopCallWait, func() { errc <- s.applyProducerFilters(filters) }); err != nil {
		return err
	}
	return <-errc
}

func (s *Service) applyProducerFilters(filters map[int]producerFilter) error {
	if s.phase != phaseRecording {
		return errors.New("ChangeTraceConfig: the session is ending")
	}
	r := s.opts.Perfetto
	var errs []error
	for i, filter := range filters {
		dc := &s.cfg.DataSources[i]
		dc.perfettoProducers = filter
		if !r.serves(dc.Name) {
			continue // a built-in data source
		}
		bound := map[*perfettoConn]bool{}
		for _, p := range s.producers {
			if ps, ok := p.side.(*perfettoSide); ok && p.index == i {
				bound[ps.conn] = true
			}
		}
		conns, descs := r.matching(dc.Name, filter)
		for k, c := range conns {
			if bound[c] {
				continue
			}
			spec := producerSpec{index: i, name: dc.Name, target: dc.TargetBuffer, source: dc.Name}
			p, err := s.newPerfettoProducer(spec, c, descs[k])
			if err != nil {
				errs = append(errs, err)
				continue
			}
			s.producers = append(s.producers, p)
			p.state = stateStarting
			go p.run()
		}
	}
	return errors.Join(errs...)
}
