#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/, replays the committed corpus through each (every seed
# and every crash reproducer, once), then fuzzes each target for SECONDS (default 20), FUZZ_JOBS
# (default 2) at a time. Fails on a crash (a panic, an abort, a stack overflow), an input that
# takes over 10 s, or memory over 2 GiB.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   SECONDS 0: build and replay only
#
# It needs no cargo-fuzz and no nightly toolchain: a plain `cargo build` in the workspace's
# target directory, with scripts/fuzz-rustc.sh adding cargo-fuzz's coverage flags to skiff's
# own crates, so that every dependency is the one `cargo build --workspace` already built; the
# targets are then run directly, as `cargo fuzz run` does. libfuzzer-sys builds libFuzzer
# with a C++ compiler. No sanitizer: the targets are safe Rust over safe-Rust parsers, where a
# panic, an abort, a stack overflow, a hang or runaway memory is what there is to find.
#
# Nothing is written into the repository: the targets land in target/debug, and new inputs,
# logs and crash reproducers in target/fuzz/<target>/. A reproducer, once its bug is fixed
# (with a regression test beside the code), is copied into fuzz/corpus/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${1:-20}
shift || true
case "$seconds" in
    '' | *[!0-9]*) echo "fuzz: usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac
jobs=${FUZZ_JOBS:-2}
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do
        t=${f##*/}
        targets+=("${t%.rs}")
    done
fi

command -v c++ >/dev/null || { echo "fuzz: libFuzzer needs a C++ compiler: run scripts/setup.sh" >&2; exit 1; }

# Every version the fuzz crate shares with the workspace must be the workspace's, or its
# dependencies are built again: its lock file is the workspace's, with the fuzz crate's own
# additions (libfuzzer-sys) resolved into it (and not kept in git, so it cannot drift).
cp Cargo.lock fuzz/Cargo.lock
cargo metadata --manifest-path fuzz/Cargo.toml --format-version 1 >/dev/null

# The fuzz crate's `dev` profile must be the workspace's, or its dependencies are built again.
dev_profile() { awk '/^\[/ { p = ($0 == "[profile.dev]" || $0 == "[profile.dev.package.\"*\"]") } p && /=/' "$1"; }
if [ "$(dev_profile Cargo.toml)" != "$(dev_profile fuzz/Cargo.toml)" ]; then
    echo "fuzz: the [profile.dev] sections of fuzz/Cargo.toml and Cargo.toml differ: make them the same" >&2
    exit 1
fi

target_dir=${CARGO_TARGET_DIR:-$root/target}
bin=$target_dir/debug
work=$target_dir/fuzz
mkdir -p "$work"
start=$SECONDS
CARGO_TARGET_DIR=$target_dir RUSTC_WRAPPER=$root/scripts/fuzz-rustc.sh \
    cargo build --locked --manifest-path fuzz/Cargo.toml --bins 2>&1 | tee "$work/build.log" >&2
others=$(grep -E '^ *Compiling ' "$work/build.log" |
    grep -Evc ' (skiff-(api|control|agent|fuzz)|libfuzzer-sys|arbitrary) v' || true)
echo "fuzz: built in $((SECONDS - start))s" >&2
if [ "$others" -gt 0 ]; then
    echo "fuzz: that compiled $others dependencies \`cargo build --workspace\` had not built" \
        "(a first build, or fuzz/Cargo.toml's dependencies resolve other features)" >&2
fi

# Rust's threads get 2 MiB of stack, and the server parses requests on such threads: the
# targets run with no more, so deep nesting that would overflow there overflows here.
ulimit -s 2048
limits=(-timeout=10 -rss_limit_mb=2048)
# The image targets unpack each input into a temporary directory: in memory, 20 times faster.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    TMPDIR=$(mktemp -d /dev/shm/skiff-fuzz.XXXXXX)
    export TMPDIR
    trap 'rm -rf "$TMPDIR"' EXIT
    trap 'exit 130' INT TERM
fi

# The committed corpus, each input once.
start=$SECONDS
failed=()
for t in "${targets[@]}"; do
    [ -x "$bin/$t" ] || { echo "fuzz: no target $t" >&2; exit 2; }
    mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
    inputs=(fuzz/corpus/"$t"/*)
    [ -e "${inputs[0]}" ] || { echo "fuzz: $t has no corpus in fuzz/corpus/$t" >&2; exit 1; }
    if ! "$bin/$t" "${limits[@]}" -artifact_prefix="$work/$t/artifacts/" "${inputs[@]}" \
        >"$work/$t/replay.log" 2>&1; then
        tail -n 40 "$work/$t/replay.log" >&2
        failed+=("$t")
    elif ! grep -q 'inline 8-bit counters' "$work/$t/replay.log"; then
        echo "fuzz: $t has no coverage instrumentation (scripts/fuzz-rustc.sh did not add it)" >&2
        failed+=("$t")
    fi
done
echo "fuzz: replayed the corpus of ${#targets[@]} targets in $((SECONDS - start))s" >&2
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: corpus inputs fail in ${failed[*]} (logs in $work/<target>/replay.log)" >&2
    exit 1
fi
[ "$seconds" -gt 0 ] || exit 0

# Fuzzing: FUZZ_JOBS targets at a time. New inputs go to the work corpus; the committed inputs
# are its seeds, except those over 64 KiB (inputs of complexity bugs, there to be replayed),
# which would make libFuzzer mutate inputs that long.
fuzz_one() {
    local t=$1 f seeds=()
    rm -f "$work/$t/failed"
    for f in "$root"/fuzz/corpus/"$t"/*; do
        [ "$(stat -c %s "$f")" -gt 65536 ] || seeds+=("$f")
    done
    (IFS=,; printf '%s' "${seeds[*]}") >"$work/$t/seeds"
    if "$bin/$t" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$work/$t/artifacts/" -seed_inputs="@$work/$t/seeds" "$work/$t/corpus" \
        >"$work/$t/fuzz.log" 2>&1; then
        echo "fuzz: $t: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/$t/fuzz.log" | tr -s ' \t' ' ')" >&2
    else
        tail -n 60 "$work/$t/fuzz.log" >&2
        echo "fuzz: $t FAILED (log $work/$t/fuzz.log, reproducer in $work/$t/artifacts/)" >&2
        touch "$work/$t/failed"
    fi
}
start=$SECONDS
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    fuzz_one "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
    [ ! -e "$work/$t/failed" ] || failed+=("$t")
done
echo "fuzz: fuzzed ${#targets[@]} targets for ${seconds}s each, $jobs at a time, in $((SECONDS - start))s" >&2
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: crashes in ${failed[*]}: fix the bug, add a regression test, and copy the" \
        "(minimised: <target> -minimize_crash=1 -runs=100000 <input>) input into fuzz/corpus/<target>/" >&2
    exit 1
fi
