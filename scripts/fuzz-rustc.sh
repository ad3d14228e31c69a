#!/usr/bin/env bash
# The rustc wrapper of scripts/fuzz.sh: cargo-fuzz's coverage instrumentation (sanitizer
# coverage with 8-bit counters and PC table, compare tracing, stack depth; `--cfg fuzzing`) for
# skiff's own crates (api, control, agent) and the fuzz targets, and nothing else: every
# dependency stays the very build `cargo build --workspace` made in target/debug, which the fuzz
# build then reuses. (skiff's crates get other artifacts than the workspace's: fuzz/Cargo.toml
# builds them with another profile, so cargo hashes them apart.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rustc=$1
shift
instrument=
for arg in "$@"; do
    case "$arg" in
        "$root"/api/src/*.rs | "$root"/control/src/*.rs | "$root"/agent/src/*.rs) instrument=1 ;;
        fuzz_targets/*.rs | "$root"/fuzz/fuzz_targets/*.rs) instrument=1 ;;
    esac
done
if [ -z "$instrument" ]; then
    exec "$rustc" "$@"
fi
exec "$rustc" "$@" -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
    -Cllvm-args=-simplifycfg-branch-fold-threshold=0 --cfg fuzzing
