// Package plugins owns the producer side that is not the SMB itself: the
// data-source interface shared by in-process data sources and out-of-process
// plugins, and the host side that launches plugins.
//
// Plugins are untrusted: nothing a plugin sends is believed without
// validation by the service. This package must not touch trace buffers or
// sinks.
package plugins
