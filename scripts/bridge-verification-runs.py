#!/usr/bin/env python3
"""Generate data/calibration/bridge-verification-runs.yaml from a Megatron-Bridge tree.

Megatron-Bridge's model verification cards (examples/model_verification_cards/*/card.yaml)
record measured training runs: the command that ran (`./scripts/training/train.sh ... --recipe
NAME ...`), the Bridge commit it ran at, and the last ten steps' step time, model TFLOP/s per
GPU and tokens per second per GPU. This script turns each run whose model has a model card here
into a configuration the cost model can replay, read the way a user's input would be:

  1. the recipe, read by this server's Python recipe reader from the Bridge sources of the
     run's own commit (`moe-skills --json check --config <recipe file> --recipe NAME`);
  2. the command line, read by this server's launcher reader (train.sh's Slurm options, the
     options it forwards to run_recipe.py, Hydra overrides), whose settings win;

and writes the configuration with the measurement. Nothing here is fitted: the file is a held-out
check (`moe-skills calibrate` reports it).

Usage:
    scripts/bridge-verification-runs.py BRIDGE_GIT_DIR --binary target/release/moe-skills
        [--rev REV] [-o OUT]
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from held_out_runs import git, source_arguments  # noqa: E402

CARDS = "examples/model_verification_cards"

# Performance recipes force balanced routing on mock data, as the calibration table's runs do;
# the functional items (pretrain, sft, peft, ...) train on real data with the router's own
# routing and are sanity checks by the cards' own account.
PERFORMANCE_ITEMS = {"pretrain_performance"}


def card_runs(source, rev):
    paths = [
        p
        for p in git(source, "ls-tree", "-r", "--name-only", rev, CARDS).split()
        if p.endswith("/card.yaml")
    ]
    for path in paths:
        card = yaml.safe_load(git(source, "show", f"{rev}:{path}"))
        commit = (card.get("verification_environment") or {}).get("bridge_commit")
        for item, by_gpu in (card.get("items") or {}).items():
            if not isinstance(by_gpu, dict):
                continue
            for gpu, run in by_gpu.items():
                if not isinstance(run, dict):
                    continue
                metrics = run.get("metrics") or {}
                if not metrics.get("last_10_steps_model_tflops_per_gpu_avg"):
                    continue
                command = run.get("command")
                if not isinstance(command, str) or "--recipe" not in command:
                    continue
                yield {
                    "card": path,
                    "item": item,
                    "gpu": gpu,
                    "precision": run.get("precision"),
                    "commit": run.get("bridge_commit") or commit,
                    "last_verified": str(run.get("last_verified", "")),
                    "command": " ".join(command.split()),
                    "metrics": metrics,
                }


def checkout(source, commit, cache):
    """The run's Bridge sources, or None when its commit is not in the history given."""
    dest = os.path.join(cache, commit)
    if not os.path.isdir(dest):
        try:
            tar = git(source, "archive", commit, "src/megatron/bridge", text=False)
        except subprocess.CalledProcessError:
            return None
        os.makedirs(dest)
        subprocess.run(["tar", "-x", "-C", dest], input=tar, check=True)
    return dest


def recipe_file(tree, recipe):
    """The module run_recipe.py loads `recipe` from (scripts/training/recipe_runner.py
    `load_recipe`): a benchmark recipe perf_recipes defines under that name wins, else the
    library's definition, else a library module that re-exports it (`x as recipe`)."""
    found = []
    for root, _, files in os.walk(os.path.join(tree, "src/megatron/bridge")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            perf = "/perf_recipes/" in path
            if re.search(rf"^def {re.escape(recipe)}\(", text, re.M):
                found.append((0 if perf else 1, path))
            elif re.search(rf"\bas {re.escape(recipe)}\b", text):
                found.append((3 if perf else 2, path))
    found.sort()
    return found[0][1] if found else None


def check(binary, *args):
    out = subprocess.run([binary, "--json", "check", *args], capture_output=True, text=True)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        return {"error": (out.stderr or out.stdout).strip()}


# The fields `check` needs before it evaluates, and its flags for them.
REQUIRED_FLAGS = {
    "model": "--model",
    "hardware": "--hardware",
    "num_gpus": "--num-gpus",
    "seq_length": "--seq-length",
}


def read_command(binary, command_file, from_recipe):
    """The command line read; a field `check` needs that the command leaves to the recipe is
    given from the recipe's reading (a flag, which the command does not set, so nothing of the
    command's is overridden)."""
    flags = []
    for _ in REQUIRED_FLAGS:
        body = check(binary, "--config", command_file, *flags)
        missing = re.search(r"field `(\w+)`: missing", body.get("error", ""))
        known = (from_recipe.get("configuration") or {})
        if not missing or missing.group(1) not in REQUIRED_FLAGS or missing.group(1) not in known:
            return body
        flags += [REQUIRED_FLAGS[missing.group(1)], str(known[missing.group(1)])]
    return body


def explicit(body):
    """The fields a reading set itself (not the defaults it assumed)."""
    assumed = {a["key"] for a in body.get("assumed_defaults", [])}
    return {k: v for k, v in body["configuration"].items() if k not in assumed}


def main():
    args, rev, date = source_arguments(
        __doc__.splitlines()[0], "Megatron-Bridge", "data/calibration/bridge-verification-runs.yaml"
    )
    runs, skipped = [], []
    with tempfile.TemporaryDirectory() as cache:
        for run in card_runs(args.source, rev):
            recipe = re.search(r"--recipe\s+(\S+)", run["command"]).group(1)
            label = f"{run['card'].split('/')[-2]} {run['item']} {run['gpu']}"
            tree = checkout(args.source, run["commit"], cache)
            if tree is None:
                skipped.append((label, f"commit {run['commit'][:8]} is not in the history read"))
                continue
            path = recipe_file(tree, recipe)
            if path is None:
                skipped.append((label, f"`{recipe}` not found at {run['commit'][:8]}"))
                continue
            from_recipe = check(args.binary, "--config", path, "--recipe", recipe)
            with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
                f.write(run["command"] + "\n")
                command_file = f.name
            from_command = read_command(args.binary, command_file, from_recipe)
            os.unlink(command_file)
            if "configuration" not in from_recipe or "configuration" not in from_command:
                why = from_recipe.get("error") or from_command.get("error") or "no configuration"
                skipped.append((label, why.splitlines()[0]))
                continue
            config = dict(from_recipe["configuration"])
            from_line = explicit(from_command)
            # The command names its model only through the recipe's name; the recipe's own
            # reading (its checkpoint) is the better name.
            if "model" in config:
                from_line.pop("model", None)
            config.update(from_line)
            # The command's own fields it could not know (the recipe's model and GPU) stay the
            # recipe's; the GPU count is the job's (nodes x GPUs per node).
            config["num_gpus"] = from_command["configuration"]["num_gpus"]
            m = run["metrics"]
            runs.append(
                {
                    "id": f"{run['card'].split('/')[-2]}/{run['item']}/{run['gpu'].lower()}",
                    "card": run["card"],
                    "item": run["item"],
                    "kind": "performance" if run["item"] in PERFORMANCE_ITEMS else "functional",
                    "recipe": recipe,
                    "bridge_commit": run["commit"],
                    "last_verified": run["last_verified"],
                    "command": run["command"],
                    "config": config,
                    "measured": {
                        "model_tflops_per_gpu": m["last_10_steps_model_tflops_per_gpu_avg"],
                        "step_time_s": round(m["last_10_steps_step_time_ms_avg"] / 1000.0, 5),
                        "tokens_per_second_per_gpu": m.get(
                            "last_10_steps_tokens_per_second_per_gpu_avg"
                        ),
                    },
                }
            )
    header = [
        "# Measured runs of Megatron-Bridge's model verification cards, replayable by the cost model.",
        f"# Source: NVIDIA-NeMo/Megatron-Bridge commit {rev} ({date}), {CARDS}/*/card.yaml.",
        "# Generated by scripts/bridge-verification-runs.py; do not edit by hand. Each run's",
        "# configuration is its recipe as this server's Python recipe reader reads it at the run's",
        "# own Bridge commit, overlaid with its train.sh command line as the launcher reader reads",
        "# it. Held out: nothing is fitted on these runs.",
        "# kind: performance (tuned benchmark recipes: forced balanced routing, mock data) or",
        "# functional (the cards' sanity-check runs: real data, the router's own routing, SFT/PEFT).",
    ]
    for label, why in skipped:
        header.append(f"# not replayable: {label}: {why}")
    body = {"source": {"repository": "NVIDIA-NeMo/Megatron-Bridge", "commit": rev}, "runs": runs}
    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(header) + "\n")
        yaml.safe_dump(body, f, sort_keys=False, width=100, allow_unicode=True)


if __name__ == "__main__":
    main()
