// Command tracepipe records traces: producers write into shared memory
// buffers, the service collects their chunks into trace buffers and streams
// packets to sinks, and the result opens in Perfetto's tools.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "tracepipe: the CLI is being assembled; see README.md")
	os.Exit(0)
}
