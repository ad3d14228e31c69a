#!/usr/bin/env bash
# Builds the fuzz targets in fuzz/ (cargo-fuzz, libFuzzer) and runs each for SECONDS
# (default 20) on its seed corpus; fails on the first crash, leak of time (an input over 10 s)
# or memory (over 2 GiB). Crash reproducers land in fuzz/artifacts/<target>/; fix the code,
# add a regression test, and copy the input into fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# The machine needs only the stable toolchain: RUSTC_BOOTSTRAP=1 lets it take the unstable
# flags cargo-fuzz passes (sanitizer coverage). No sanitizer is used (`-s none`): the targets
# are safe Rust over safe-Rust parsers, where a panic, an abort, a stack overflow, a hang or
# runaway memory is what there is to find, and a plain build is much quicker.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-20}
shift || true
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
cargo_fuzz_version=0.13.2

if ! cargo fuzz --version 2>/dev/null | grep -q "$cargo_fuzz_version"; then
    echo "fuzz: installing cargo-fuzz $cargo_fuzz_version" >&2
    cargo install --locked cargo-fuzz --version "$cargo_fuzz_version"
fi
command -v c++ >/dev/null || { echo "fuzz: libFuzzer needs a C++ compiler: run scripts/setup.sh" >&2; exit 1; }

flags=(--fuzz-dir fuzz --sanitizer none --target-dir "$CARGO_TARGET_DIR")
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi
cargo fuzz build "${flags[@]}"

# New inputs go to a work corpus outside the repository; the seeds stay as committed.
work=$CARGO_TARGET_DIR/fuzz-corpus
failed=()
for t in "${targets[@]}"; do
    mkdir -p "$work/$t" "fuzz/corpus/$t"
    echo "fuzz: $t for ${seconds}s" >&2
    log=$work/$t.log
    if cargo fuzz run "${flags[@]}" "$t" "$work/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$log" 2>&1; then
        grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units)' "$log" | sed "s/^/fuzz: $t: /" >&2 || true
    else
        tail -n 60 "$log" >&2
        failed+=("$t")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: crashes in ${failed[*]} (reproducers in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${seconds}s each without a crash" >&2
