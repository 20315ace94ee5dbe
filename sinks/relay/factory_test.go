package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
)

func TestFactoryFieldErrors(t *testing.T) {
	f, ok := sinks.Lookup(SinkType)
	if !ok {
		t.Fatal("relay sink type not registered")
	}
	_, err := f(map[string]any{"max_batches": -1, "tls_cert_file": "c.pem", "adress": "x", "clock_sync_period": "10ms"})
	var fe sinks.FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not FieldErrors", err)
	}
	want := map[string]bool{"address": true, "max_batches": true, "tls_cert_file": true, "adress": true, "clock_sync_period": true}
	for _, e := range fe {
		delete(want, e.Path)
	}
	if len(want) != 0 {
		t.Errorf("no error for %v in %v", want, fe)
	}
	b, err := f(map[string]any{"address": "127.0.0.1:9", "tls_ca_file": "ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	if d := b.Destination(); d != "relay tls://127.0.0.1:9" {
		t.Errorf("destination %q", d)
	}
}

func TestFactoryClockSync(t *testing.T) {
	f, _ := sinks.Lookup(SinkType)
	for _, tc := range []struct {
		m    map[string]any
		want time.Duration
	}{
		{map[string]any{}, DefaultClockSyncPeriod},
		{map[string]any{"clock_sync_period": "2m"}, 2 * time.Minute},
		{map[string]any{"clock_sync": false}, -1},
	} {
		tc.m["address"] = "127.0.0.1:9"
		b, err := f(tc.m)
		if err != nil {
			t.Fatalf("%v: %v", tc.m, err)
		}
		if got := b.(*builder).opts.ClockSyncPeriod; got != tc.want {
			t.Errorf("%v: ClockSyncPeriod %v, want %v", tc.m, got, tc.want)
		}
	}
}
