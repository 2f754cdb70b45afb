"""A minimal MCP client over stdio for the project's scripts: start `moe-skills serve`,
initialize, call tools one after another, return each full `tools/call` result."""

import json
import os
import subprocess


def call_tools(binary, calls, client_name):
    """`calls`: (tool, arguments) pairs. Returns each call's `result` object; a protocol error
    or an `isError` result stops the script with the tool's name."""
    proc = subprocess.Popen([binary, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "MOE_SKILLS_LOG": "warn"})

    def send(message):
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def receive(request_id):
        while True:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit("the server closed its output")
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": client_name, "version": "1"}}})
    receive(0)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    results = []
    for i, (tool, arguments) in enumerate(calls, start=1):
        send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
              "params": {"name": tool, "arguments": arguments}})
        message = receive(i)
        result = message.get("result", {})
        if "error" in message or result.get("isError"):
            raise SystemExit(f"{tool}: {json.dumps(message)[:500]}")
        results.append(result)
    proc.stdin.close()
    proc.wait(timeout=30)
    return results
