package perfettosvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/config"
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
	newCfg, err := config.ConfigFromTraceConfig(tc)
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
	return cs.svc.ChangeProducerFilters(context.Background(), newCfg)
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
