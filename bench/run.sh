#!/usr/bin/env bash
# The benchmark (BENCHMARKS.md): idemgate against nginx proxy_pass and idempotent-proxy-server on
# this machine, in one run; criterion's in-process ledger benches; the console's data calls on a
# 10M-event demo ledger (BENCH_EVENTS); a fleet of instances on one PostgreSQL (bench/fleet.py).
# Installs what it needs (Debian 12, as root). Results: target/bench/.
#   bash bench/run.sh                 the full run (release builds; ~47 min on 2 cores)
#   BENCH_SMOKE=1 bash bench/run.sh   a few seconds each, debug builds, no peer (CI: the harness
#                                     cannot rot); BENCH_PEER=1 adds idempotent-proxy-server
# bench/ab.py compares two builds of `idemgate serve` alternated (run it after this has installed
# what it needs; see its --help).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/bench

IDEMGATE_DEPS="${IDEMGATE_DEPS:-} bench postgres" source .ci/deps   # nginx-light, wrk, redis-server, postgresql
# Outside the checkout, beside cargo's own tools, so a machine builds it once (3–4 min), not on
# every clean clone.
# The smoke run goes without the peer (BENCH_PEER=0): building it takes longer than the run.
tools=${CARGO_HOME:-$HOME/.cargo}/idemgate-bench-tools
ips=$tools/bin/idempotent-proxy-server
if [ "${BENCH_PEER:-$([ "${BENCH_SMOKE:-}" = 1 ] && echo 0 || echo 1)}" = 1 ]; then
  [ -x "$ips" ] || cargo install idempotent-proxy-server --version 1.2.2 --locked --root "$tools"
fi

if [ "${BENCH_SMOKE:-}" = 1 ]; then
  # The test build's targets and flags, so CI reuses its artifacts (`--bins` alone would rebuild).
  cargo build --workspace --locked --features idemgate-server/ts --all-targets
  export IDEMGATE_BIN=target/debug/idemgate CONSOLE_BENCH_BIN=target/debug/console-bench \
    BARE_PROXY_BIN=target/debug/bare-proxy
  echo "== criterion benches, once each (smoke)"
  cargo test --locked --workspace --features idemgate-server/ts --benches 2>&1 | tee target/bench/criterion.txt | grep -E "^(Testing|Success)|per fsync"
else
  cargo build --release --locked -p idemgate-cli -p idemgate-tests --bin idemgate --bin console-bench \
    --bin bare-proxy
  export IDEMGATE_BIN=target/release/idemgate CONSOLE_BENCH_BIN=target/release/console-bench \
    BARE_PROXY_BIN=target/release/bare-proxy
  echo "== criterion: durable claims and fingerprints"
  cargo bench --locked -p idemgate-ledger --bench claims 2>&1 | tee target/bench/criterion.txt \
    | grep -E "^[a-z_]+/|thrpt|time:|per fsync"
fi
echo "== proxies under wrk, fixed-rate latency, the console on a big ledger"
IPS_BIN=$ips python3 bench/run.py
echo "== a fleet on one PostgreSQL, on loopback and 1 ms away"
if [ "${BENCH_SMOKE:-}" = 1 ]; then
  BENCH_SECONDS=1 BENCH_ROUNDS=1 BENCH_FLEET="1 2" python3 bench/fleet.py
else
  python3 bench/fleet.py
fi
if [ "${BENCH_SMOKE:-}" = 1 ]; then
  # bench/ab.py, the A/B tool (BENCHMARKS.md), is not part of the full run: one short pair here so
  # it cannot rot either.
  echo "== A/B tool (smoke)"
  python3 bench/ab.py --pairs 1 --rounds 1 --seconds 1 --wal-map --b-env IDEMGATE_LOG=info
fi
