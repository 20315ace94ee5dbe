// Package configs holds tracepipe's embedded default configuration and the
// commented example configurations shipped with it. It owns no logic: only
// the files and the embed that exposes them.
package configs

import "embed"

// Files holds every YAML config shipped in this folder, and the ProtoVM
// program descriptions under protovm/.
//
//go:embed *.yaml protovm/*.yaml
var Files embed.FS

// Default is the name of the config `tracepipe run` uses when no -c is given.
const Default = "default.yaml"
