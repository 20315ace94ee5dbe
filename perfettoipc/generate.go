package perfettoipc

// Regenerate perfetto_ipc.pb.go after editing perfetto_ipc.proto (needs
// protoc and protoc-gen-go on PATH; .ci/run checks the committed file is
// current):
//go:generate protoc --go_out=. --go_opt=paths=source_relative perfetto_ipc.proto perfetto_config.proto
