# The test command named in README.md. CI (.ci/run) calls exactly `make test`.
GO ?= go

.PHONY: test vet fmt-check unit bench

test: vet fmt-check unit

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -timeout 20m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
