#!/usr/bin/env bash
# Runs every cargo-fuzz target for FUZZ_SECONDS (default 20) each, starting from the committed seed
# corpus (fuzz/corpus/<target>); new inputs go to a scratch directory, crashes to fuzz/artifacts.
# The toolchain is stable: RUSTC_BOOTSTRAP lets cargo-fuzz pass its -Z sanitizer flags.
# FUZZ_DEV=1 builds without optimisations (much quicker to build, fewer runs per second): the CI
# smoke run. Longer runs: FUZZ_SECONDS=3600 bash fuzz/run.sh [target ...]
set -euo pipefail
cd "$(dirname "$0")"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --version '^0.13' --locked
# cargo fuzz has no --locked: check the lock file first, so the targets build with the versions
# committed here (and a change to the workspace's dependencies updates fuzz/Cargo.lock too).
cargo metadata --locked --format-version 1 > /dev/null
export RUSTC_BOOTSTRAP=1
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(canon keys signature config)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
flags=()
[ "${FUZZ_DEV:-0}" = 1 ] && flags=(--dev)
cargo fuzz build "${flags[@]}"
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  echo "== fuzz $t for ${FUZZ_SECONDS:-20}s"
  if ! cargo fuzz run "${flags[@]}" "$t" "$scratch/$t" "corpus/$t" -- -max_total_time="${FUZZ_SECONDS:-20}" \
      > "$scratch/$t.log" 2>&1; then
    tail -40 "$scratch/$t.log"
    echo "fuzz: $t failed (crash inputs in fuzz/artifacts/$t)"
    exit 1
  fi
  grep -E '^Done' "$scratch/$t.log" || true
done
echo "fuzz: ${#targets[@]} targets ran clean"
