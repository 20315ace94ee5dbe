package relay

import (
	"errors"
	"testing"

	"github.com/tracepipe/tracepipe/sinks"
)

func TestFactoryFieldErrors(t *testing.T) {
	f, ok := sinks.Lookup(SinkType)
	if !ok {
		t.Fatal("relay sink type not registered")
	}
	_, err := f(map[string]any{"max_batches": -1, "tls_cert_file": "c.pem", "adress": "x"})
	var fe sinks.FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not FieldErrors", err)
	}
	want := map[string]bool{"address": true, "max_batches": true, "tls_cert_file": true, "adress": true}
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
