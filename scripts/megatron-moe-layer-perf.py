#!/usr/bin/env python3
"""Generate data/calibration/megatron-moe-layer-perf.yaml from a Megatron-LM tree.

Megatron-LM's MoE performance regression test
(tests/functional_tests/test_cases/common/moe_perf/) times one `MoELayer` alone (router,
dispatch, grouped experts, combine, shared experts) on 8 H100 GPUs with expert parallelism 8:
the forward and the backward of a 4096-token microbatch, averaged over 20 iterations after 5
warm-up ones, each iteration started behind a long dummy GEMM "to hide the router launch
overhead" (`__main__.py`). Its cases (`test_cases.py`: a Mixtral-like and a DeepSeek-like
proxy, NCCL all-to-all, DeepEP and HybridEP, BF16 and FP8 blockwise) and their recorded times
(`baseline.json`) are read here, each case written as the Megatron-LM command line the test's
`TransformerConfig` amounts to and read by this server's own argument reader:

  moe-skills --json check --config <command line> --hardware h100 --num-gpus 8

The layer is built from `TransformerConfig` defaults besides what the test sets: no
`gated_linear_unit` and GELU (so the experts are not gated), no bias, an FP32 router with an
auxiliary load-balancing loss and forced load balancing, and under FP8 the `hybrid` format with
the blockwise recipe. Nothing is fitted on these runs: the file is a held-out check of the time
model's MoE block (`moe-skills calibrate` reports it).

Usage:
    scripts/megatron-moe-layer-perf.py MEGATRON_LM_GIT_DIR --binary target/release/moe-skills
        [--rev REV] [-o OUT]
"""

import json
import os
import sys
import tempfile
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from held_out_runs import check_config, git, source_arguments, write_runs  # noqa: E402

TEST_DIR = "tests/functional_tests/test_cases/common/moe_perf"
GPU_COUNT = 8
HARDWARE = "h100"


def load_cases(text):
    """The test's `PERFORMANCE_CASES`, read by running `test_cases.py` with a stand-in for the
    one thing it takes from torch (the input dtype's name)."""
    torch = types.ModuleType("torch")
    torch.dtype = object
    torch.bfloat16 = "bfloat16"
    torch.cuda = types.SimpleNamespace()
    saved = sys.modules.get("torch")
    sys.modules["torch"] = torch
    try:
        namespace = {"__name__": "moe_perf_test_cases"}
        exec(compile(text, "test_cases.py", "exec"), namespace)
    finally:
        if saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = saved
    return list(namespace["PERFORMANCE_CASES"])


def command_line(case):
    """The Megatron-LM arguments of the layer `_build_transformer_config` builds for `case`."""
    m = case.model
    args = [
        "--num-layers", "1",
        "--hidden-size", m.hidden_size,
        "--num-attention-heads", m.num_attention_heads,
        "--num-experts", m.num_experts,
        "--moe-ffn-hidden-size", m.moe_ffn_hidden_size,
        "--moe-router-topk", m.router_topk,
        "--moe-router-load-balancing-type", "aux_loss",
        "--moe-aux-loss-coeff", "1.0",
        "--moe-router-score-function", m.moe_router_score_function,
        "--moe-router-dtype", m.moe_router_dtype,
        "--moe-token-dispatcher-type", case.token_dispatcher,
        "--moe-grouped-gemm",
        "--disable-bias-linear",
        "--seq-length", m.seq_length,
        "--max-position-embeddings", m.seq_length,
        "--micro-batch-size", m.micro_batch_size,
        # One microbatch on each data-parallel rank.
        "--global-batch-size", m.micro_batch_size * GPU_COUNT
        // (case.tensor_model_parallel_size * case.pipeline_model_parallel_size
               * case.context_parallel_size),
        "--tensor-model-parallel-size", case.tensor_model_parallel_size,
        "--pipeline-model-parallel-size", case.pipeline_model_parallel_size,
        "--context-parallel-size", case.context_parallel_size,
        "--expert-model-parallel-size", case.expert_model_parallel_size,
        "--expert-tensor-parallel-size", case.expert_tensor_parallel_size,
        "--bf16",
        # The layer alone has no embedding; a vocabulary is needed to read the line only.
        "--vocab-size", "32000",
    ]
    if case.token_dispatcher == "flex":
        args += ["--moe-flex-dispatcher-backend", case.moe_flex_dispatcher_backend]
    if case.tensor_model_parallel_size > 1:
        args.append("--sequence-parallel")
    if m.moe_shared_expert_intermediate_size:
        args += ["--moe-shared-expert-intermediate-size", m.moe_shared_expert_intermediate_size]
    if m.moe_router_num_groups:
        args += ["--moe-router-num-groups", m.moe_router_num_groups,
                 "--moe-router-group-topk", m.moe_router_group_topk]
    if m.moe_router_enable_expert_bias:
        args.append("--moe-router-enable-expert-bias")
    if case.moe_permute_fusion:
        args.append("--moe-permute-fusion")
    if case.moe_router_fusion:
        args.append("--moe-router-fusion")
    if case.moe_router_force_load_balancing:
        args.append("--moe-router-force-load-balancing")
    if case.fp8:
        # `_build_transformer_config` overrides the case's format and recipe.
        args += ["--fp8-format", "hybrid", "--fp8-recipe", "blockwise"]
    return " ".join(str(a) for a in args)


def main():
    a, commit, date = source_arguments(
        __doc__.splitlines()[0], "Megatron-LM", "data/calibration/megatron-moe-layer-perf.yaml"
    )
    cases = load_cases(git(a.source, "show", f"{commit}:{TEST_DIR}/test_cases.py"))
    baseline = json.loads(git(a.source, "show", f"{commit}:{TEST_DIR}/baseline.json"))
    runs, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        config_file = os.path.join(tmp, "command.sh")
        for case in cases:
            if (case.gpu_platform or "").lower() != HARDWARE:
                skipped.append(f"{case.name}: measured on {case.gpu_platform}")
                continue
            measured = baseline.get(case.name)
            if measured is None:
                skipped.append(f"{case.name}: no baseline recorded")
                continue
            line = command_line(case)
            with open(config_file, "w", encoding="utf-8") as f:
                f.write(f"torchrun pretrain_gpt.py {line}\n")
            body, reason = check_config(a.binary, config_file, HARDWARE, GPU_COUNT)
            if body is None:
                skipped.append(f"{case.name}: {reason}")
                continue
            if body.get("violations"):
                rules = ", ".join(v.get("code", "?") for v in body["violations"])
                skipped.append(f"{case.name}: violates {rules}")
                continue
            runs.append({
                "id": case.name,
                "dispatcher": case.token_dispatcher
                + (f"/{case.moe_flex_dispatcher_backend}" if case.token_dispatcher == "flex" else ""),
                "command_line": line,
                "config": body["configuration"],
                "measured": {
                    "forward_ms": round(measured["forward_ms"], 4),
                    "backward_ms": round(measured["backward_ms"], 4),
                    "max_allocated_gib": round(measured["max_allocated_bytes"] / 2**30, 4),
                },
            })
    header = [
        "# Megatron-LM's MoE layer performance test: one MoE layer's forward and backward on 8",
        "# H100 GPUs (EP8), replayable by the cost model.",
        f"# Source: NVIDIA/Megatron-LM commit {commit} ({date}),",
        f"# {TEST_DIR}/test_cases.py (the cases) and baseline.json (mean of 20 timed",
        "# iterations per case). Generated by scripts/megatron-moe-layer-perf.py; do not edit by",
        "# hand. Held out: nothing is fitted on these runs.",
    ]
    write_runs(a.output, header, "NVIDIA/Megatron-LM", commit, runs, skipped)


if __name__ == "__main__":
    main()
