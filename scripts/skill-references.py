#!/usr/bin/env python3
"""Write each embedded skill's worked examples and evals from the current binary.

For every example below: `skills/<skill>/references/<name>.yaml` (the full configuration, taken
from a recipe of the skill's card, optionally edited), `skills/<skill>/references/<name>.md`
(the claim it supports, the MCP tool call, and the answer: the rationale text verbatim and the
key numbers of structuredContent), and `skills/<skill>/evals/evals.json` in the
Megatron-Bridge format (id, question, expected_skill, expected_script, ground_truth,
expected_behavior) plus, for the tool-answerable items, `tool_call` (tool and arguments) and
`expect` (JSON pointers into the structured answer with `equals`, `min`/`max` or `contains`),
which `tests/skill_evals.rs` replays against the tool functions. Every number comes from a
tools/call to `moe-skills serve` over stdio; none is typed here. Ranges are the answer ±15%,
so a recalibration that moves a number a little does not force a rewrite, and one that
changes the conclusion does.

Usage: scripts/skill-references.py [--binary target/debug/moe-skills]
"""

import argparse
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_stdio  # noqa: E402  (the scripts' shared MCP client)

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 0.15


def card_recipe(card, recipe_id):
    with open(os.path.join(ROOT, "cards", card, "card.yaml")) as f:
        data = yaml.safe_load(f)
    for recipe in data.get("recipes", []):
        if recipe["id"] == recipe_id:
            return recipe
    raise SystemExit(f"no recipe {recipe_id} in cards/{card}/card.yaml")


def call_tools(binary, calls):
    return [(result["content"][0]["text"], result["structuredContent"])
            for result in mcp_stdio.call_tools(binary, calls, "skill-references")]


def at(value, pointer):
    for part in pointer.strip("/").split("/"):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def expectation(answer, pointer, how):
    """An `expect` entry for the value at `pointer`: `equals`, `range` (±15%) or `contains`."""
    value = at(answer, pointer)
    if how == "range":
        low, high = sorted([value * (1 - TOLERANCE), value * (1 + TOLERANCE)])
        return {"path": pointer, "min": round(low, 2), "max": round(high, 2)}
    if isinstance(how, tuple) and how[0] == "contains":
        if how[1] not in value:
            raise SystemExit(f"{pointer}: {how[1]!r} not in the answer")
        return {"path": pointer, "contains": how[1]}
    return {"path": pointer, "equals": value}


# ---- the examples -------------------------------------------------------------------------

def dsv3_128k():
    return card_recipe("moe-long-context", "dsv3-128k-h100")["config"]


def triage_before():
    return card_recipe("moe-memory-triage", "qwen3-235b-128k-h100-triage-before")["config"]


def without_recompute(config):
    config = copy.deepcopy(config)
    config["recompute_granularity"] = None
    config.pop("recompute_modules", None)
    return config


def examples():
    """(skill, name, title, claim, section, config files, calls, evals)."""
    before = triage_before()
    after = without_recompute(before)
    rl = card_recipe("long-context-moe-rl", "qwen35-35b-128k-h100-baseline")
    best = card_recipe("moe-optimization-workflow", "qwen3-30b-8xb200-mxfp8")
    return [
        {
            "skill": "moe-long-context",
            "name": "dsv3-128k-h100",
            "title": "DeepSeek-V3 at 128K on 256 H100: CP sizing and the representative layout",
            "claim": "CP ≈ seq/4096 gives CP32 at 128K, and the documented DeepSeek-V3 128K H100 layout "
                     "(TP1 CP32 EP32 PP8 VPP4, selective recompute, optimizer CPU offload) fits in 80 GB.",
            "section": "CP Sizing Rules (16K to 256K)",
            "files": {"dsv3-128k-h100.yaml": (dsv3_128k(), "recipe dsv3-128k-h100 of cards/moe-long-context/card.yaml")},
            "calls": [
                ("size_cp", {"model": "deepseek-v3", "seq_length": 131072, "hardware": "h100", "num_gpus": 256}),
                ("check_feasibility", dsv3_128k()),
            ],
            "evals": [
                {
                    "id": "moe-long-context-cp-sizing-dsv3-128k",
                    "question": "Use the moe-long-context skill. How large should context parallelism be for DeepSeek-V3 at 128K tokens on 256 H100, and what local sequence does each CP rank hold?",
                    "call": 0,
                    "expect": [("/rule_of_thumb_cp", "equals"), ("/context_parallel_size", "equals"),
                               ("/local_seq_length", "equals"), ("/rationale", ("contains", "seq/4096"))],
                    "truth": lambda a: (
                        f"The answer should apply the rule of thumb CP ≈ seq/4096 = 131072/4096 = {a['rule_of_thumb_cp']}, "
                        f"confirm CP{a['context_parallel_size']} with the cost model's search ({a['local_seq_length']} tokens per CP rank), "
                        "and keep DP alive where the GPU count allows."),
                    "behavior": [
                        "Read the moe-long-context skill (CP Sizing Rules) before answering.",
                        "State the CP ≈ seq/4096 rule and round to a power of two.",
                        "Give the local sequence per CP rank.",
                        "Use size_cp (or the same arithmetic) rather than guessing.",
                    ],
                },
                {
                    "id": "moe-long-context-dsv3-128k-fits",
                    "question": "Use the moe-long-context skill. Does the representative DeepSeek-V3 128K H100 layout (TP1 CP32 EP32 PP8 VPP4 on 256 GPUs, recompute mla_up_proj/layernorm/moe/mlp, optimizer CPU offload) fit in H100 memory, and how fast is it predicted to run?",
                    "call": 1,
                    "expect": [("/fits", "equals"), ("/memory/peak_gib", "range"),
                               ("/performance/model_tflops_per_gpu", "range")],
                    "truth": lambda a: (
                        f"The layout {'fits' if a['fits'] else 'does not fit'}: predicted peak {a['memory']['peak_gib']:.1f} GiB of "
                        f"{a['memory']['capacity_gib']:.1f}, about {a['performance']['model_tflops_per_gpu']:.0f} model TFLOP/s per GPU. "
                        "The layout carries selective recompute and optimizer CPU offload; the answer should name them as what makes it fit."),
                    "behavior": [
                        "Read the moe-long-context skill (Representative Config Families) before answering.",
                        "Check the layout with check_feasibility instead of estimating by hand.",
                        "Report peak memory against capacity and the predicted throughput.",
                    ],
                },
            ],
        },
        {
            "skill": "moe-parallelism-and-recompute",
            "name": "qwen3-235b-128k-h100-recompute",
            "title": "Qwen3-235B at 128K on 256 H100 without recompute: choosing the recompute list",
            "claim": "Selective recompute of cheap modules comes before full recompute: the cheapest setting "
                     "that fits is chosen by its step-time overhead, and the alternatives are ranked.",
            "section": "Recompute Modules: Costs and Savings",
            "files": {"qwen3-235b-128k-h100-recompute.yaml": (after, "recipe qwen3-235b-128k-h100-triage-before of cards/moe-memory-triage/card.yaml with recompute removed")},
            "calls": [("choose_recompute", {"config": after})],
            "evals": [
                {
                    "id": "parallelism-recompute-qwen3-235b-128k",
                    "question": "Use the moe-parallelism-and-recompute skill. My Qwen3-235B-A22B run at 128K on 256 H100 (TP4 CP8 EP8 PP8 VPP4, no recompute) does not fit. Which recompute setting should I use, and what does it cost?",
                    "call": 0,
                    "expect": [("/recompute_granularity", "equals"), ("/recompute_modules", "equals"),
                               ("/fits", "equals"), ("/peak_gib", "range")],
                    "truth": lambda a: (
                        f"The cheapest setting that fits is {a['recompute_granularity']} recompute of [{', '.join(a['recompute_modules'])}]: predicted peak "
                        f"{a['peak_gib']:.1f} GiB, {a['time_overhead_pct']:.1f}% step-time overhead. Selective module lists come before full recompute, "
                        "and the answer should show the ranked alternatives."),
                    "behavior": [
                        "Read the moe-parallelism-and-recompute skill (Recompute Modules) before answering.",
                        "Prefer selective recompute over full recompute when a selective list fits.",
                        "Quote the memory saving and the step-time overhead from choose_recompute.",
                    ],
                },
            ],
        },
        {
            "skill": "moe-memory-triage",
            "name": "qwen3-235b-128k-h100-triage",
            "title": "Triage: a commit removed selective recompute from a Qwen3-235B 128K run",
            "claim": "Replaying before and after with triage_oom names the changed field as the cause, "
                     "attributes the memory delta to activations and offers the cheapest fix.",
            "section": "OOM After Removing Recompute",
            "files": {
                "qwen3-235b-128k-h100-before.yaml": (before, "recipe qwen3-235b-128k-h100-triage-before of cards/moe-memory-triage/card.yaml"),
                "qwen3-235b-128k-h100-after.yaml": (after, "the same with recompute removed (the commit)"),
            },
            "calls": [("triage_oom", {"before": before, "after": after})],
            "evals": [
                {
                    "id": "memory-triage-removed-recompute",
                    "question": "Use the moe-memory-triage skill. After a commit that removed recompute_granularity/recompute_modules [layernorm, moe], my Qwen3-235B 128K run on 256 H100 goes out of memory. Why, and what is the cheapest fix?",
                    "call": 0,
                    "expect": [("/after/fits", "equals"), ("/before/fits", "equals"),
                               ("/after/peak_gib", "range"), ("/causes/0/field", "equals"),
                               ("/rationale", ("contains", "activations +"))],
                    "truth": lambda a: (
                        f"Before the commit the run is predicted at {a['before']['peak_gib']:.1f} GiB "
                        f"({'fits' if a['before']['fits'] else 'does not fit'}); after it at {a['after']['peak_gib']:.1f} GiB "
                        f"({'fits' if a['after']['fits'] else 'does not fit'}). The root cause is {a['causes'][0]['field']}: activations that "
                        "recompute dropped stay resident for every in-flight microbatch; the fix is to restore selective recompute (or the cheapest list choose_recompute finds)."),
                    "behavior": [
                        "Read the moe-memory-triage skill before answering.",
                        "Replay before and after with triage_oom rather than guessing.",
                        "Name the removed recompute as the cause and the activation term as what grew.",
                        "Offer restoring selective recompute as the fix.",
                    ],
                },
            ],
        },
        {
            "skill": "moe-optimization-workflow",
            "name": "qwen3-30b-8xb200-mxfp8",
            "title": "Qwen3-30B-A3B on 8 B200 (MXFP8): which wall binds",
            "claim": "Fit first, then find the binding wall (memory, communication, compute and host) "
                     "from the step-time breakdown before tuning.",
            "section": "The Three Walls",
            "files": {"qwen3-30b-8xb200-mxfp8.yaml": (best["config"], "recipe qwen3-30b-8xb200-mxfp8 of cards/moe-optimization-workflow/card.yaml")},
            "calls": [("check_feasibility", best["config"])],
            "evals": [
                {
                    "id": "optimization-workflow-three-walls-qwen3-30b",
                    "question": "Use the moe-optimization-workflow skill. For Qwen3-30B-A3B on 8 B200 with MXFP8 (the best measured layout), does it fit, which wall binds, and what throughput does the model predict?",
                    "call": 0,
                    "expect": [("/fits", "equals"), ("/walls/binding", "equals"),
                               ("/performance/model_tflops_per_gpu", "range")],
                    "truth": lambda a: (
                        f"The layout {'fits' if a['fits'] else 'does not fit'} (peak {a['memory']['peak_gib']:.1f} GiB); the binding wall is "
                        f"{a['walls']['binding']} ({a['walls']['explanation']}); predicted {a['performance']['model_tflops_per_gpu']:.0f} "
                        "model TFLOP/s per GPU. The answer should follow the fit → scale → profile → retune order."),
                    "behavior": [
                        "Read the moe-optimization-workflow skill (The Three Walls) before answering.",
                        "Check memory first, then name the binding wall from the time breakdown.",
                        "Tie the next tuning step to that wall.",
                    ],
                },
            ],
        },
        {
            "skill": "long-context-moe-rl",
            "name": "qwen35-35b-128k-h100-baseline",
            "title": "Qwen3.5-35B-A3B at 128K on 32 H100, stage 1 (full recompute baseline)",
            "claim": "Full recompute with a larger local sequence fits 128K on 32 H100; the model is "
                     "checked against the write-up's measured throughput and memory.",
            "section": "Measured Stage Table: Qwen3.5-35B-A3B, 128K, 32 H100",
            "files": {"qwen35-35b-128k-h100-baseline.yaml": (rl["config"], "recipe qwen35-35b-128k-h100-baseline of cards/long-context-moe-rl/card.yaml")},
            "calls": [("check_feasibility", rl["config"]),
                      ("lookup_recipe", {"model": "qwen3.5-35b-a3b", "seq_length": 131072, "hardware": "h100", "num_gpus": 32, "limit": 1})],
            "evals": [
                {
                    "id": "long-context-moe-rl-stage1-fits",
                    "question": "Use the long-context-moe-rl skill. Does the stage-1 Qwen3.5-35B-A3B 128K layout on 32 H100 (TP2 CP2 EP8 PP4, full uniform recompute of 1 layer) fit, and how does the prediction compare with the measured "
                                f"{rl['measured']['model_tflops_per_gpu']} TFLOP/s/GPU and {rl['measured']['peak_memory_gb']} GB the write-up reports?",
                    "call": 0,
                    "expect": [("/fits", "equals"), ("/memory/peak_gib", "range"),
                               ("/performance/model_tflops_per_gpu", "range")],
                    "truth": lambda a: (
                        f"The layout {'fits' if a['fits'] else 'does not fit'}: predicted peak {a['memory']['peak_gib']:.1f} GiB and "
                        f"{a['performance']['model_tflops_per_gpu']:.0f} model TFLOP/s per GPU against the measured {rl['measured']['peak_memory_gb']} GB "
                        f"and {rl['measured']['model_tflops_per_gpu']} (card qwen35-35b-128k-h100-baseline). "
                        "Full recompute is accepted so that the local sequence can grow."),
                    "behavior": [
                        "Read the long-context-moe-rl skill (Measured Stage Table) before answering.",
                        "Compare predicted and measured numbers and state the gap.",
                        "Explain why full recompute is accepted in this regime.",
                    ],
                },
                {
                    "id": "long-context-moe-rl-recipe-lookup",
                    "question": "Use the long-context-moe-rl skill. Which documented recipe should I start from for Qwen3.5-35B-A3B at 128K on 32 H100?",
                    "call": 1,
                    "expect": [("/recipes/0/skill", "equals"), ("/recipes/0/exact", "equals")],
                    "truth": lambda a: (
                        f"The nearest documented recipe is {a['recipes'][0]['id']} ({a['recipes'][0]['layout']}, recompute "
                        f"{a['recipes'][0]['recompute']}) from the long-context-moe-rl card; the answer should state its measured and "
                        "predicted numbers and any disagreement between them."),
                    "behavior": [
                        "Read the long-context-moe-rl skill before answering.",
                        "Use lookup_recipe and quote the recipe's source.",
                        "State measured and predicted numbers side by side.",
                    ],
                },
            ],
        },
    ]


# ---- writing ------------------------------------------------------------------------------

def key_numbers(tool, answer):
    keys = {
        "size_cp": ["/rule_of_thumb_cp", "/context_parallel_size", "/local_seq_length"],
        "check_feasibility": ["/fits", "/memory/peak_gib", "/memory/capacity_gib",
                              "/performance/model_tflops_per_gpu", "/performance/step_time_s", "/walls/binding"],
        "choose_recompute": ["/recompute_granularity", "/recompute_modules", "/fits", "/peak_gib",
                             "/memory_saving_gib", "/time_overhead_pct"],
        "triage_oom": ["/before/peak_gib", "/before/fits", "/after/peak_gib", "/after/fits"],
        "lookup_recipe": ["/recipes/0/id", "/recipes/0/layout", "/recipes/0/predicted/model_tflops_per_gpu"],
    }[tool]
    rows = []
    for pointer in keys:
        try:
            rows.append(f"| `{pointer}` | {json.dumps(at(answer, pointer))} |")
        except (KeyError, IndexError, TypeError):
            continue
    return "| structuredContent | value |\n|---|---|\n" + "\n".join(rows)


def write(binary):
    by_skill = {}
    by_skill_examples = {}
    for ex in examples():
        folder = os.path.join(ROOT, "skills", ex["skill"])
        refs = os.path.join(folder, "references")
        os.makedirs(refs, exist_ok=True)
        for filename, (config, origin) in ex["files"].items():
            with open(os.path.join(refs, filename), "w") as f:
                f.write(f"# {origin}\n# Generated by scripts/skill-references.py.\n")
                yaml.safe_dump(config, f, sort_keys=False)
        answers = call_tools(binary, ex["calls"])
        md = [f"# {ex['title']}", "",
              f"Supports: *{ex['claim']}* (SKILL.md, section \"{ex['section']}\").", "",
              "Generated by `scripts/skill-references.py` from `moe-skills serve` over stdio; "
              "every number below is the tool's answer, none is typed by hand.", "",
              "## Configuration", ""]
        for filename, (_, origin) in ex["files"].items():
            md += [f"[`{filename}`]({filename}) ({origin}):", "", "```yaml",
                   open(os.path.join(refs, filename)).read().rstrip(), "```", ""]
        for i, ((tool, arguments), (text, answer)) in enumerate(zip(ex["calls"], answers), start=1):
            md += [f"## Call {i}: `{tool}`", "", "```json",
                   json.dumps({"method": "tools/call", "params": {"name": tool, "arguments": arguments}}, indent=1),
                   "```", "", "### Answer (the text block, verbatim)", "", text.rstrip(), "",
                   "### Key numbers", "", key_numbers(tool, answer), ""]
        with open(os.path.join(refs, ex["name"] + ".md"), "w") as f:
            f.write("\n".join(md))
        items = by_skill.setdefault(ex["skill"], [])
        for ev in ex["evals"]:
            tool, arguments = ex["calls"][ev["call"]]
            answer = answers[ev["call"]][1]
            items.append({
                "id": ev["id"],
                "question": ev["question"],
                "expected_skill": ex["skill"],
                "expected_script": None,
                "ground_truth": ev["truth"](answer),
                "expected_behavior": ev["behavior"],
                "reference": f"references/{ex['name']}.md",
                "tool_call": {"tool": tool, "arguments": arguments},
                "expect": [expectation(answer, p, how) for p, how in ev["expect"]],
            })
    for ex in examples():
        by_example = by_skill_examples.setdefault(ex["skill"], [])
        by_example.append(ex)
    for skill, exs in by_skill_examples.items():
        skill_md = os.path.join(ROOT, "skills", skill, "SKILL.md")
        text = open(skill_md).read()
        # The section is the file's last and is rewritten whole.
        text = text.split("\n## Worked Examples\n")[0].rstrip("\n") + "\n"
        text += "\n## Worked Examples\n\n"
        for ex in exs:
            text += f"- [{ex['title']}](references/{ex['name']}.md): the configuration file, the tool call and its answer.\n"
        text += ("- [evals/evals.json](evals/evals.json): questions with ground truth and expected behaviour; the "
                 "tool-answerable ones carry the tool call and the expected values.\n")
        with open(skill_md, "w") as f:
            f.write(text)
    for skill, items in by_skill.items():
        evals = os.path.join(ROOT, "skills", skill, "evals")
        os.makedirs(evals, exist_ok=True)
        with open(os.path.join(evals, "evals.json"), "w") as f:
            json.dump(items, f, indent=2, ensure_ascii=False)
            f.write("\n")
        print(f"{skill}: {len(items)} evals")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "debug", "moe-skills"))
    write(parser.parse_args().binary)
    sys.exit(0)
