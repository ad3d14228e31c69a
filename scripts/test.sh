#!/usr/bin/env bash
# The whole test suite: installs what a fresh machine lacks, then runs every Rust test (unit,
# integration against real server processes, real kubectl) and the Python client tests.
# Run as root: later tiers start real containers and network namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."

python=$(scripts/setup.sh --python)
# Tests that ask the Python kubernetes client (protobuf field names) run `python3`: the venv's.
PATH="$(dirname "$python"):$PATH"
export PATH
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast
# The server without its embedded agent (the 32-bit ARM build in cross/build.sh).
cargo check -p skiff-control --no-default-features
# The static aarch64 binaries, run under qemu-aarch64-static.
cross/smoke.sh
SKIFF_BIN="$PWD/target/debug/skiff" "$python" -m pytest -q tests/python
# The fuzz targets (fuzz/, docs/fuzzing.md): built on target/debug's dependencies, their corpus
# (seeds and crash reproducers) replayed, then each fuzzed for a few seconds, two at a time.
scripts/fuzz.sh "${SKIFF_FUZZ_SECONDS:-10}"
