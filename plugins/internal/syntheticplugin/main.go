// Command syntheticplugin serves the built-in tracepipe.synthetic data
// source as a plugin, so that benchmarks compare the same source in
// process and out of process (the transport is the only difference).
// It is a test tool: the package is internal and nothing imports it.
package main

import (
	"fmt"
	"os"

	"github.com/tracepipe/tracepipe/plugins"
	_ "github.com/tracepipe/tracepipe/plugins/builtin" // registers tracepipe.synthetic
	"github.com/tracepipe/tracepipe/plugins/sdk"
)

const name = "tracepipe.synthetic"

func main() {
	f, ok := plugins.Lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "syntheticplugin: %s is not registered\n", name)
		os.Exit(1)
	}
	sdk.Serve(map[string]plugins.Factory{name: f})
}
