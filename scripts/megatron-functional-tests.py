#!/usr/bin/env python3
"""Generate data/calibration/megatron-functional-tests.yaml from a Megatron-LM tree.

Megatron-LM's functional tests (tests/functional_tests/test_cases/<model>/<case>/) train small
models for a few dozen steps on DGX machines and keep what each step measured as golden values
(`golden_values_<environment>_<platform>.json`): `iteration-time`, and from the tensorboard
writer, which is the last rank (`_set_tensorboard_writer`, megatron/training/global_vars.py),
`mem-allocated-bytes` (what stays allocated between steps) and `mem-max-allocated-bytes`
(`torch.cuda.max_memory_allocated`). The case's `model_config.yaml` holds its Megatron-LM
arguments, and the platform's recipe (tests/test_utils/recipes/<gpu>/*.yaml) its node and GPU
count. This script takes every case with experts (`--num-experts`) that a recipe runs on DGX
H100 or GB200 for training, and reads its arguments the way a user's input is read:

  moe-skills --json check --config model_config.yaml --hardware <gpu> --num-gpus <n>

then writes the configuration read with what the golden values measured. Nothing is fitted on
these runs: the file is a held-out check (`moe-skills calibrate` reports it).

Usage:
    scripts/megatron-functional-tests.py MEGATRON_LM_GIT_DIR --binary target/release/moe-skills
        [--rev REV] [-o OUT]
"""

import json
import os
import re
import statistics
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from held_out_runs import check_config, git, source_arguments, write_runs  # noqa: E402

CASES = "tests/functional_tests/test_cases"
RECIPES = "tests/test_utils/recipes"
# Recipe folder, platform name in the golden values' file name, hardware card.
PLATFORMS = [("h100", "dgx_h100", "h100"), ("gb200", "dgx_gb200", "gb200")]
# Steps 1 and 2 hold start-up work (compilation, allocator warm-up, CUDA-graph capture).
FIRST_STEADY_STEP = 3


def gpus_by_case(source, rev, folder, platform):
    """Test case -> GPU count, for the cases a recipe of `folder` runs on `platform`, and the
    cases whose entry is commented out; a case that two recipes run at different GPU counts is
    left out (its count is not known)."""
    counts, disabled = {}, {}
    for path in git(source, "ls-tree", "-r", "--name-only", rev, f"{RECIPES}/{folder}").split():
        if not path.endswith(".yaml"):
            continue
        recipe = yaml.safe_load(git(source, "show", f"{rev}:{path}")) or {}
        spec = recipe.get("spec") or {}
        gpus = int(spec.get("nodes", 1)) * int(spec.get("gpus", 8))
        for product in recipe.get("products") or []:
            platforms = {
                p for sub in product.get("products") or [] for p in sub.get("platforms") or []
            }
            if platform not in platforms:
                continue
            for case in product.get("test_case") or []:
                counts.setdefault(case, set()).add(gpus)
        # An entry commented out (a case disabled after it ran, its golden values kept) ran
        # with the recipe's own node and GPU count.
        for line in git(source, "show", f"{rev}:{path}").splitlines():
            m = re.match(r"\s*#\s*-\s*test_case:\s*\[([^\]]+)\]", line)
            if m:
                for case in m.group(1).split(","):
                    disabled.setdefault(case.strip(), set()).add(gpus)
    active = set(counts)
    for case, n in disabled.items():
        counts.setdefault(case, n)
    return {case: n.pop() for case, n in counts.items() if len(n) == 1}, set(disabled) - active


def values(golden, metric):
    series = (golden.get(metric) or {}).get("values") or {}
    return sorted(
        (int(step), v) for step, v in series.items() if isinstance(v, (int, float))
    )


def measured(golden):
    steady = [v for step, v in values(golden, "iteration-time") if step >= FIRST_STEADY_STEP]
    peak = [v for _, v in values(golden, "mem-max-allocated-bytes")]
    resident = [v for _, v in values(golden, "mem-allocated-bytes")]
    if not steady or not peak:
        return None
    out = {
        "step_time_s": round(statistics.median(steady), 5),
        "steps": len(steady),
        "last_rank_max_allocated_gib": round(max(peak) / 2**30, 4),
    }
    if resident:
        out["last_rank_allocated_between_steps_gib"] = round(
            statistics.median(resident) / 2**30, 4
        )
    return out


def conditions(args_text):
    """Settings of the test harness that a tuned run would not have, noted beside the row."""
    notes = []
    if "NVTE_ALLOW_NONDETERMINISTIC_ALGO: 0" in args_text:
        notes.append("deterministic")
    for flag, note in [
        ("--log-num-zeros-in-grad: true", "counts zero gradients"),
        ("--log-params-norm: true", "parameter norm"),
    ]:
        if flag in args_text:
            notes.append(note)
    return notes


def main():
    a, commit, date = source_arguments(
        __doc__.splitlines()[0], "Megatron-LM", "data/calibration/megatron-functional-tests.yaml"
    )
    files = git(a.source, "ls-tree", "-r", "--name-only", commit, CASES).split()
    runs, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        config_file = os.path.join(tmp, "model_config.yaml")
        for folder, platform, hardware in PLATFORMS:
            gpus, disabled = gpus_by_case(a.source, commit, folder, platform)
            for golden_path in files:
                if not golden_path.endswith(f"golden_values_dev_{platform}.json"):
                    continue
                case_dir = os.path.dirname(golden_path)
                case = os.path.basename(case_dir)
                args_path = f"{case_dir}/model_config.yaml"
                if args_path not in files:
                    continue
                args_text = git(a.source, "show", f"{commit}:{args_path}")
                if "--num-experts" not in args_text or "inference" in case:
                    continue
                if case not in gpus:
                    skipped.append(f"{case} {platform}: no recipe gives its GPU count")
                    continue
                golden = json.loads(git(a.source, "show", f"{commit}:{golden_path}"))
                golden = {k: v for k, v in golden.items() if isinstance(v, dict)}
                got = measured(golden)
                if got is None:
                    skipped.append(f"{case} {platform}: no step time or peak memory measured")
                    continue
                with open(config_file, "w", encoding="utf-8") as f:
                    f.write(args_text)
                body, reason = check_config(a.binary, config_file, hardware, gpus[case])
                if body is None:
                    skipped.append(f"{case} {platform}: {reason.replace(config_file, args_path)}")
                    continue
                if body.get("violations"):
                    rules = ", ".join(v.get("code", "?") for v in body["violations"])
                    skipped.append(f"{case} {platform}: violates {rules} at {gpus[case]} GPUs")
                    continue
                runs.append({
                    "id": f"{case}/{platform}",
                    "case": args_path,
                    "golden_values": golden_path,
                    "harness": conditions(args_text)
                    + (["recipe entry commented out"] if case in disabled else []),
                    "config": body["configuration"],
                    "measured": got,
                })
    header = [
        "# Megatron-LM functional tests with experts, measured on DGX H100 and GB200, replayable",
        "# by the cost model.",
        f"# Source: NVIDIA/Megatron-LM commit {commit} ({date}),",
        f"# {CASES}/*/*/golden_values_dev_<platform>.json and model_config.yaml; GPU counts from",
        f"# {RECIPES}/<gpu>/*.yaml. Generated by scripts/megatron-functional-tests.py; do not edit",
        "# by hand. Memory is the last rank's (the tensorboard writer): the highest",
        "# mem-max-allocated-bytes of the run and the median mem-allocated-bytes; the step time",
        f"# is the median iteration-time from step {FIRST_STEADY_STEP}. Held out: nothing is fitted",
        "# on these runs.",
    ]
    write_runs(a.output, header, "NVIDIA/Megatron-LM", commit, runs, skipped)


if __name__ == "__main__":
    main()
