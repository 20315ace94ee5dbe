package pipeline

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/tracepipe/tracepipe/config"
)

// ChangeProducerFilters takes the producer_name_filter and
// producer_name_regex_filter of newCfg's data sources into the running
// session (a Perfetto consumer's ChangeTraceConfig): each of the session's
// data sources takes the filters of the data source of newCfg with its
// name and DataSourceConfig. On the service goroutine, the connected
// Perfetto producers the new filters admit and that do not serve the data
// source yet start serving it; those no longer admitted go on (as in
// traced). The caller checked that nothing else changed. It fails once the
// session is ending.
func (s *Service) ChangeProducerFilters(ctx context.Context, newCfg *config.Config) error {
	// The session's data sources are the config's (EnableTracing keeps
	// those no producer serves yet): matched by name and config.
	filters := map[int]config.ProducerFilter{}
	for i, dc := range s.cfg.DataSources {
		for _, nd := range newCfg.DataSources {
			if nd.Name == dc.Name && bytes.Equal(nd.EncodedPerfettoConfig, dc.EncodedPerfettoConfig) {
				filters[i] = nd.PerfettoProducers
				break
			}
		}
	}
	return s.changeProducerFilters(ctx, filters)
}

// changeProducerFilters applies new producer_name_filters (by
// data_sources index) on the service goroutine and starts the producers
// they admit that do not serve the data source yet.
func (s *Service) changeProducerFilters(ctx context.Context, filters map[int]config.ProducerFilter) error {
	errc := make(chan error, 1)
	if err := s.onLoop(ctx, loopCallWait, func() { errc <- s.applyProducerFilters(filters) }); err != nil {
		return err
	}
	return <-errc
}

func (s *Service) applyProducerFilters(filters map[int]config.ProducerFilter) error {
	if s.phase != phaseRecording {
		return errors.New("ChangeTraceConfig: the session is ending")
	}
	var errs []error
	for i, filter := range filters {
		s.cfg.DataSources[i].PerfettoProducers = filter
		if !slices.Contains(s.joinable, i) {
			continue // a built-in data source
		}
		if err := s.bindJoiners(i); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
