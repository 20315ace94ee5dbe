// Package ctlpb holds the control protocol's generated code (control.proto).
package ctlpb

// Regenerate control.pb.go and control_grpc.pb.go after editing
// control.proto (needs protoc, protoc-gen-go and protoc-gen-go-grpc on
// PATH; .ci/run checks the committed files are current):
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative control.proto
