#!/usr/bin/env bash
# idemgate's spans against an OTLP receiver built on the OpenTelemetry project's `opentelemetry-proto`
# package, installed pinned into a virtual environment of its own (target/otlp-venv).
# Needs target/debug/idemgate (or IDEMGATE_BIN) and python3 with venv.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
idemgate=${IDEMGATE_BIN:-$root/target/debug/idemgate}
venv=$root/target/otlp-venv
source "$root/tests/pinned_venv.sh"
pinned_venv "$venv" opentelemetry.proto 'opentelemetry-proto==1.45.2' 'protobuf==7.36.2'
exec "$venv/bin/python" "$root/tests/otlp/otlp_test.py" "$idemgate"
