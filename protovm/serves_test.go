package protovm

import (
	"bytes"
	"strings"
	"testing"
)

// `serves` names the program's consumer; it is not part of the program.
func TestServes(t *testing.T) {
	body := "commands:\n  - merge: {src: [12, \"2[]\"], dst: [12, 2], key_field: 1}\n"
	plain, err := Compile([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{ServesRestore, ServesPerfetto} {
		src := []byte("serves: " + v + "\n" + body)
		b, err := Compile(src, nil)
		if err != nil || !bytes.Equal(b, plain) {
			t.Fatalf("serves: %s changed the program (%v)", v, err)
		}
		if got, err := Serves(src); got != v || err != nil {
			t.Fatalf("Serves = %q, %v; want %q", got, err, v)
		}
	}
	if got, err := Serves([]byte(body)); got != "" || err != nil {
		t.Fatalf("no serves key: %q %v", got, err)
	}
	bad := []byte("serves: both\n" + body)
	if _, err := Compile(bad, nil); err == nil || !strings.Contains(err.Error(), `serves: "both": want restore or perfetto`) {
		t.Fatalf("Compile: %v", err)
	}
	if _, err := Serves(bad); err == nil {
		t.Fatal("Serves accepted an unknown value")
	}
}
