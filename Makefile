# fpmd: the two commands of the README, and the rest.
#   make demo   install what is missing, build, run fpmd + nginx, print the URL
#   make test   install what is missing, run every test
.PHONY: all deps build demo test bench clean

all: build

deps:
	scripts/deps.sh

build:
	cargo build --release

demo: deps build
	scripts/demo.sh

test: deps
	cargo test --release -- --test-threads=2

clean:
	cargo clean
