#!/usr/bin/env bash
# The whole test suite: installs what a fresh machine lacks, then runs every Rust test (unit,
# integration against real server processes, real kubectl), the emulated aarch64 smoke test,
# the kube-rs operator's test (tests/kube-rs-operator), the Python client tests and the fuzz
# targets.
# Run as root: later tiers start real containers and network namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's end is printed with the seconds since the start (where CI time goes).
phase() { echo "test: $1 at ${SECONDS}s" >&2; }
python=$(scripts/setup.sh --python)
# Tests that ask the Python kubernetes client (protobuf field names) run `python3`: the venv's.
PATH="$(dirname "$python"):$PATH"
export PATH
phase "setup done"
cargo test --workspace --no-run
phase "test build done"
cargo test --workspace --doc
phase "doc tests done"

# Builds that need no test machine run in the background, at low priority, while the test
# binaries run (they mostly wait on servers, containers and probes): the server without its
# embedded agent (the 32-bit ARM build in cross/build.sh), the fuzz targets, and the static
# aarch64 binaries. Each of these two cargo runs has its own lock: target/debug's is free
# once the test binaries are built, and the cross build has target/cross.
mkdir -p target
(nice -n 10 cargo check -p skiff-control --no-default-features &&
    nice -n 10 scripts/fuzz.sh 0) >target/test-fuzz-build.log 2>&1 &
fuzz_build=$!
nice -n 10 cross/smoke.sh --build-only >target/test-cross-build.log 2>&1 &
cross_build=$!
# The kube-rs operator and its test (tests/kube-rs-operator): a crate of its own outside the
# workspace, with its own lock file and target directory (kube-rs, tokio, hyper and their TLS
# stack are no dependency of skiff), built and linted here; its test runs below.
kube_rs=(--locked --manifest-path tests/kube-rs-operator/Cargo.toml)
kube_rs_target=$PWD/target/kube-rs-operator
(export CARGO_TARGET_DIR=$kube_rs_target
    nice -n 10 cargo test "${kube_rs[@]}" --test skiff --no-run &&
    nice -n 10 cargo clippy "${kube_rs[@]}" --all-targets -- -D warnings) \
    >target/test-kube-rs-build.log 2>&1 &
kube_rs_build=$!

status=0
# The test binaries, in two lanes (scripts/run-tests.py says which run together).
scripts/run-tests.py || status=$?
phase "test binaries done"

wait "$fuzz_build" || { tail -n 60 target/test-fuzz-build.log >&2; echo "test: the fuzz build failed" >&2; exit 1; }
wait "$cross_build" || { tail -n 60 target/test-cross-build.log >&2; echo "test: the aarch64 build failed" >&2; exit 1; }
wait "$kube_rs_build" || { tail -n 60 target/test-kube-rs-build.log >&2; echo "test: the kube-rs operator's build or lint failed" >&2; exit 1; }
phase "background builds done"
# A controller built on kube-rs reconciling a custom resource on a real server.
SKIFF_BIN="$PWD/target/debug/skiff" CARGO_TARGET_DIR=$kube_rs_target cargo test "${kube_rs[@]}" --test skiff
phase "kube-rs operator test done"
# The static aarch64 binaries, run under qemu-aarch64-static.
cross/smoke.sh
phase "aarch64 smoke done"
SKIFF_BIN="$PWD/target/debug/skiff" "$python" -m pytest -q tests/python
phase "python tests done"
# The fuzz targets (fuzz/, docs/fuzzing.md): built on target/debug's dependencies, their corpus
# (seeds and crash reproducers) replayed, then each fuzzed for a few seconds, two at a time.
scripts/fuzz.sh "${SKIFF_FUZZ_SECONDS:-10}"
phase "fuzz done"
exit "$status"
