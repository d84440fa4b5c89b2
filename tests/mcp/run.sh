#!/usr/bin/env bash
# idemgate's MCP gateway mode against the official MCP SDKs: the Python SDK's server behind
# `idemgate serve`, called by the Python SDK's client (both protocol revisions) and the TypeScript
# SDK's client. Installs the SDKs first, pinned: `mcp` from PyPI into a virtual environment of its
# own (target/mcp-venv), `@modelcontextprotocol/sdk` from npm (tests/mcp/package-lock.json).
# Needs target/debug/idemgate (or IDEMGATE_BIN), python3 with venv, node and npm.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
idemgate=${IDEMGATE_BIN:-$root/target/debug/idemgate}
venv=$root/target/mcp-venv
source "$root/tests/pinned_venv.sh"
pinned_venv "$venv" mcp 'mcp==2.3.0'
(cd "$root/tests/mcp" && npm ci --no-audit --no-fund --silent)
exec "$venv/bin/python" "$root/tests/mcp/sdk_test.py" "$idemgate"
