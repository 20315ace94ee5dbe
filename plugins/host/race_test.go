//go:build race

package host

// raceEnabled makes the tests build the example plugin with -race too, so
// that data races in plugins/sdk (which runs in the child) are caught: the
// tests fail when the plugin's stderr reports one.
const raceEnabled = true
