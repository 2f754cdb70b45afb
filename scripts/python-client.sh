#!/usr/bin/env bash
# Run the reference Python MCP SDK client (mcp==2.3.0) against the built server, over stdio
# and HTTP, in both protocol eras. Extra arguments are passed to the test (e.g. --skills-dir DIR);
# without any, the test fixtures are served next to the embedded catalog.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MOE_SKILLS_VENV:-target/python-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "mcp==2.3.0"
fi
cargo build --quiet --bin moe-skills
BIN="${CARGO_TARGET_DIR:-target}/debug/moe-skills"
if [ "$#" -eq 0 ]; then
  set -- --skills-dir tests/fixtures/catalog
fi
exec "$VENV/bin/python" tests/python/test_client.py "$BIN" "$@"
