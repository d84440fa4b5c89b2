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
if ! "$venv/bin/python" -c 'import mcp' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'mcp==2.3.0'
fi
(cd "$root/tests/mcp" && npm ci --no-audit --no-fund --silent)
exec "$venv/bin/python" "$root/tests/mcp/sdk_test.py" "$idemgate"
