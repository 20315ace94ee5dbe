package wire

// Regenerate datasource.pb.go and datasource_grpc.pb.go after editing
// datasource.proto (needs protoc, protoc-gen-go and protoc-gen-go-grpc on
// PATH; .ci/run checks the committed files are current):
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative datasource.proto
