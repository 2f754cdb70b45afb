"""Reference Python SDK client (mcp==2.3.0) against the moe-skills server.

Lists and reads every skill over stdio and streamable HTTP, in the legacy (initialize)
and the 2026-07-28 (stateless) protocol eras. Exits non-zero on the first failure.

usage: test_client.py BINARY [--skills-dir DIR]...
"""

import argparse
import asyncio
import socket
import subprocess
import sys
import time

from mcp import Client, StdioServerParameters

SKILL_TOOLS = {"list_skills", "search_skills", "read_skill"}
COMPUTE_TOOLS = {
    "size_cp", "lookup_recipe", "choose_recompute", "check_feasibility",
    "plan_layouts", "triage_oom", "list_models", "list_hardware",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not open its port")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


async def exercise(server, mode: str, label: str) -> int:
    async with Client(server, mode=mode) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        check(SKILL_TOOLS <= tools, f"{label}: missing tools, got {sorted(tools)}")

        listed = await client.call_tool("list_skills", {})
        check(not listed.is_error, f"{label}: list_skills failed")
        skills = listed.structured_content["skills"]
        check(len(skills) > 0, f"{label}: no skills listed")

        resources = {str(r.uri) for r in (await client.list_resources()).resources}
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        for skill in skills:
            name, uri = skill["name"], skill["uri"]
            check(uri in resources, f"{label}: {uri} not in resources/list")
            check(name in prompts, f"{label}: no prompt for {name}")
            read = await client.read_resource(uri)
            text = read.contents[0].text
            check(text.startswith("---") and f"name: {name}" in text, f"{label}: bad SKILL.md for {name}")
            tool = await client.call_tool("read_skill", {"name": name})
            check(not tool.is_error, f"{label}: read_skill {name} failed")
            check(tool.structured_content["markdown"] == text, f"{label}: read_skill text differs from resource for {name}")
            if skill["has_card"]:
                card = await client.call_tool("read_skill", {"name": name, "card": True})
                check(not card.is_error and isinstance(card.structured_content["card"], dict), f"{label}: card of {name}")

        missing = await client.call_tool("read_skill", {"name": skills[0]["name"] + "x"})
        check(missing.is_error, f"{label}: unknown skill should be an error")

        prompt = await client.get_prompt(skills[0]["name"], {"question": "What applies here?"})
        check("What applies here?" in prompt.messages[0].content.text, f"{label}: prompt lacks the question")
        if COMPUTE_TOOLS <= tools:
            await exercise_compute_tools(client, label)
        print(f"ok  {label}: {len(skills)} skills listed and read")
        return len(skills)


QWEN3_235B_128K = {
    "model": "qwen3-235b-a22b", "hardware": "h100", "num_gpus": 256, "seq_length": 131072,
    "precision": "bf16", "tp": 4, "cp": 8, "pp": 8, "vpp": 4, "ep": 8,
    "sequence_parallel": True, "global_batch_size": 32,
    "recompute_granularity": "selective", "recompute_modules": ["layernorm", "moe"],
}


async def exercise_compute_tools(client, label: str) -> None:
    """Each cost-model tool once on its happy path and once with bad input."""

    async def ok(tool: str, arguments: dict) -> dict:
        result = await client.call_tool(tool, arguments)
        check(not result.is_error, f"{label}: {tool} failed: {result.content}")
        check(isinstance(result.structured_content, dict), f"{label}: {tool} has no structured content")
        return result.structured_content

    async def error(tool: str, arguments: dict, field: str) -> None:
        result = await client.call_tool(tool, arguments)
        check(result.is_error, f"{label}: {tool} should fail for {arguments}")
        text = " ".join(getattr(block, "text", "") for block in result.content)
        check(field in text, f"{label}: {tool} error does not name `{field}`: {text}")

    check(len((await ok("list_models", {}))["models"]) >= 11, f"{label}: list_models")
    check(len((await ok("list_hardware", {}))["hardware"]) >= 6, f"{label}: list_hardware")
    recipe = await ok("lookup_recipe", {"model": "deepseek-v3", "seq_length": 262144, "hardware": "h100"})
    check(recipe["recipes"][0]["id"] == "dsv3-256k-h100", f"{label}: lookup_recipe picked {recipe['recipes'][0]['id']}")
    await error("lookup_recipe", {"model": "no-such-model", "seq_length": 4096}, "model")
    cp = await ok("size_cp", {"model": "deepseek-v3", "seq_length": 131072, "hardware": "h100", "num_gpus": 256})
    # CP16 (tight) or CP32: both fit DeepSeek-V3 at 128K on 256 H100; the rule of thumb says 32.
    check(cp["context_parallel_size"] in (16, 32), f"{label}: size_cp gave {cp['context_parallel_size']}")
    await error("size_cp", {"model": "deepseek-v3", "seq_length": 131072, "num_gpus": 0}, "num_gpus")
    checked = await ok("check_feasibility", QWEN3_235B_128K)
    check(checked["fits"] is True and "memory" in checked and "performance" in checked, f"{label}: check_feasibility")
    await error("check_feasibility", {**QWEN3_235B_128K, "hardware": "tpu"}, "hardware")
    no_recompute = {k: v for k, v in QWEN3_235B_128K.items() if not k.startswith("recompute")}
    chosen = await ok("choose_recompute", {"config": no_recompute})
    check(chosen["fits"] is True, f"{label}: choose_recompute found nothing that fits")
    await error("choose_recompute", {"config": no_recompute, "memory_budget_gib": -1}, "memory_budget_gib")
    plan = await ok("plan_layouts", {"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 16, "seq_length": 32768, "top_k": 3})
    check(len(plan["candidates"]) > 0, f"{label}: plan_layouts returned nothing")
    await error("plan_layouts", {"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 0, "seq_length": 32768}, "num_gpus")
    triage = await ok("triage_oom", {"before": QWEN3_235B_128K, "after": no_recompute})
    check(triage["after"]["fits"] is False and triage["causes"][0]["field"].startswith("recompute"), f"{label}: triage_oom")
    await error("triage_oom", {"before": QWEN3_235B_128K}, "after")


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--skills-dir", action="append", default=[])
    args = parser.parse_args()
    extra = [flag for directory in args.skills_dir for flag in ("--skills-dir", directory)]

    stdio = StdioServerParameters(command=args.binary, args=["serve", *extra])
    for mode in ("legacy", "2026-07-28", "auto"):
        await exercise(stdio, mode, f"stdio/{mode}")

    port = free_port()
    process = subprocess.Popen(
        [args.binary, "serve", "--http", f"127.0.0.1:{port}", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        url = f"http://127.0.0.1:{port}/mcp"
        for mode in ("legacy", "2026-07-28", "auto"):
            await exercise(url, mode, f"http/{mode}")
    finally:
        process.terminate()
        process.wait(timeout=10)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except Exception as error:  # report any failure as a non-zero exit
        print(f"FAIL: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
