# The two entry points of the README, plus helpers. Each target installs
# what it needs first (scripts/install-deps.sh is idempotent).
.PHONY: run test deps build bench clean

run: deps
	scripts/run-demo.sh

test: deps
	scripts/test.sh

deps:
	scripts/install-deps.sh

build: deps
	cargo build --release --bin weft
	scripts/build-mpiio.sh --release

bench: build
	scripts/bench-all.sh

clean:
	cargo clean
	rm -rf weft-cluster bench-results
