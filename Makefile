# The test command named in README.md. CI (.ci/run) calls exactly `make test`.
GO ?= go

.PHONY: test vet fmt-check unit bench soak snapload docs interleave killloop

test: vet fmt-check unit

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -timeout 20m ./...
	$(GO) test -tags smbsched -timeout 10m -run 'TestInterleaveScrapeCommitRead|TestScrapeTornHeaderOfReusedChunk' ./smb

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The long-trace soak (issue 10), not part of `make test`: 30 minutes at
# 20 MB/s, zstd rotation every 64 MiB, 4 synthetic writers + process_stats
# + sys_stats; writes a CSV of RSS/goroutines/fds every 10 s and checks RSS
# flatness, zero loss, every file alone and the set exactly once.
# Shorter: make soak SOAK_DURATION=3m
SOAK_DURATION ?= 30m
soak:
	$(GO) run ./tools/soak -duration $(SOAK_DURATION)

# The flight recorder's load acceptance (issue 16), not part of `make
# test`: 60 s at 200 MB/s into a 256 MiB ring with a snapshot every 2 s;
# fails on any producer loss. Baseline without snapshots:
# make snapload SNAPLOAD_FLAGS='-every 0'
SNAPLOAD_FLAGS ?=
snapload:
	$(GO) run ./tools/snapload $(SNAPLOAD_FLAGS)

# The generated docs: the configuration reference and its JSON Schema, from
# the code's config schema (pipeline/config_schema.go). A test
# (cmd/tracepipe TestDocsConfigReferenceIsCurrent) fails when they are stale.
docs:
	$(GO) run ./cmd/tracepipe config reference > docs/configuration-reference.md
	$(GO) run ./cmd/tracepipe config schema > docs/config.schema.json

# More schedules of the scrape/commit/read interleaving test than `make
# test` runs: make interleave SCHEDULES=20000
SCHEDULES ?= 5000
interleave:
	$(GO) test -tags smbsched -timeout 60m -run TestInterleaveScrapeCommitRead ./smb -interleave.schedules $(SCHEDULES)

# The starvation acceptance of issue 24, not part of `make test`: the
# kill-at-random-moments test N times beside HOGS busy loops; fails on any
# gap. make killloop N=1000 HOGS=2
N ?= 1000
HOGS ?= 2
killloop:
	N=$(N) HOGS=$(HOGS) ./tools/killloop/killloop.sh
