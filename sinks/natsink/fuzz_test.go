package natsink

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzParseHeaders: headers of a message are untrusted; they parse or
// fail, and a parsed identity is well formed.
func FuzzParseHeaders(f *testing.F) {
	f.Add("00000000000000ff", "0909000000000000000000000000000a", "host", "1")
	f.Add("ff", "zz", "", "0")
	f.Fuzz(func(t *testing.T, machine, session, host, seq string) {
		h := nats.Header{HeaderMachine: {machine}, HeaderSession: {session}, HeaderHost: {host}, HeaderSeq: {seq}}
		id, n, err := ParseHeaders(h)
		if err != nil {
			return
		}
		if id.Machine == 0 || n == 0 || len(id.Hostname) > 255 {
			t.Fatalf("accepted %+v seq %d", id, n)
		}
	})
}
