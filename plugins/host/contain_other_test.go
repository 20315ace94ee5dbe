//go:build !linux

package host

func removeTestBuilds() {}
