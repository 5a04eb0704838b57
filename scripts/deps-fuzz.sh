#!/usr/bin/env bash
# Installs what `make fuzz-smoke` needs and is missing: Rust's nightly
# toolchain (cargo fuzz builds with sanitizers) and cargo-fuzz.
set -euo pipefail
command -v rustup >/dev/null || { echo "rustup not found: install Rust from https://rustup.rs" >&2; exit 1; }
rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked
