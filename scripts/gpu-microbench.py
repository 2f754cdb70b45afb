#!/usr/bin/env python3
"""Kernel-level measurements behind the cost model's efficiencies (needs one CUDA GPU).

Measures, on whatever GPU it finds, with PyTorch only (no Transformer Engine):
  * ceilings: device-to-device copy bandwidth and a large BF16 / FP8 GEMM;
  * dense GEMMs as one training step runs them: forward (M,K,N), data gradient (M,N,K) and
    weight gradient (K,M,N), for token counts M and weight widths d (the other weight
    dimension 4096), in BF16, FP8 with one scale per tensor, and FP8 with DeepSeek-style
    1x128 / 128x128 block scales;
  * grouped GEMMs (MoE experts) for the expert shapes of the catalog's models, forward +
    backward in BF16, forward in FP8 with row-wise scales, against tokens per expert;
  * fused attention (scaled_dot_product_attention's cuDNN back end, the flash one as a
    cross-check), forward and backward timed apart, causal and unmasked, for the head shapes
    the hardware cards' `attention_kernels` tables key (64, 128, MLA 192/128, 256, GQA),
    against sequence length from 512 to 128K, and the exact calls of context-parallel ring
    steps for a few catalog layouts (`ring`);
  * an element-wise kernel (SwiGLU) and a fused Adam step for achieved HBM bandwidth;
  * Gated DeltaNet (`gdn`): flash-linear-attention's chunk_gated_delta_rule as Megatron-Core's
    GDN layer calls it in training (q and k L2-normalised outside the kernel and repeated to
    the value heads, log-space decay given), forward and backward timed apart, by value heads,
    sequence length and batch (needs the `fla` package; head dims 128/128);
  * Gated DeltaNet's causal convolution and q/k L2 norm (`gdn_aux`), on a rank's re-sharded
    tensors;
  * the host side of offloading (`host`): pinned host-device copies each way and both ways at
    once by size, and torch's fused CPU AdamW by thread count (parameters per second).

Every timing is the median of CUDA-event timings after warm-up (triton.testing.do_bench),
on random data. Each kernel family is checked once against an FP32 reference first.
Writes one JSON object per measurement to $OUT/microbench.jsonl (or ./microbench.jsonl)
and prints a summary. `moe-skills` reads the figures from data/calibration/, not from here.
"""

import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

OUT_DIR = os.environ.get("OUT", ".")
RESULTS = open(os.path.join(OUT_DIR, "microbench.jsonl"), "w")
DEV = "cuda"
E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max
START = time.time()


def emit(kind, **fields):
    fields["kind"] = kind
    RESULTS.write(json.dumps(fields) + "\n")
    RESULTS.flush()


def note(msg):
    print(f"[{time.time() - START:6.1f}s] {msg}", flush=True)


def bench_ms(fn, rep=40):
    return do_bench(fn, warmup=10, rep=rep, return_mode="median")


def rel_err(out, ref):
    out = out.float()
    ref = ref.float()
    if not torch.isfinite(out).all():
        return float("inf")
    return (torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)).item()


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device=DEV, dtype=torch.float32).to(dtype)


# ---------------------------------------------------------------------------------------
# FP8 helpers


def fp8_tensorwise(x):
    """x [R, C] bf16 -> (fp8, inverse scale as a 0-d fp32 tensor)."""
    amax = x.abs().amax().float().clamp(min=1e-12)
    scale = E4M3_MAX / amax
    return (x.float() * scale).to(E4M3), scale.reciprocal()


def fp8_rowwise(x):
    """x [R, C] -> (fp8, inverse scale [R, 1])."""
    amax = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)
    scale = E4M3_MAX / amax
    return (x.float() * scale).to(E4M3), scale.reciprocal()


def fp8_blocks(x, block_rows, block_cols=128):
    """x [R, C] -> (fp8, inverse scales [R/block_rows, C/block_cols])."""
    r, c = x.shape
    v = x.float().reshape(r // block_rows, block_rows, c // block_cols, block_cols)
    amax = v.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12)
    scale = E4M3_MAX / amax
    q = (v * scale).to(E4M3).reshape(r, c)
    return q, scale.reciprocal().reshape(r // block_rows, c // block_cols)


def make_gemm(prec, m, k, n):
    """Returns a closure computing out[m, n] = a[m, k] @ b[k, n] in `prec`, plus a reference."""
    a = randn(m, k)
    w = randn(n, k)  # weight stored [n, k]; b = w.t() is column-major as cuBLAS FP8 wants
    if prec == "bf16":
        b = w.t()
        return (lambda: a @ b), (lambda: a.float() @ w.float().t())
    if prec == "fp8_tensorwise":
        qa, sa = fp8_tensorwise(a)
        qw, sw = fp8_tensorwise(w)
        qb = qw.t()
        fn = lambda: torch._scaled_mm(qa, qb, sa, sw, out_dtype=torch.bfloat16, use_fast_accum=True)
        return fn, (lambda: a.float() @ w.float().t())
    if prec == "fp8_blockwise":
        # Activations 1x128, weights 128x128 (DeepSeek-V3 recipe).
        from torch.nn.functional import ScalingType, SwizzleType, scaled_mm

        qa, sa = fp8_blocks(a, 1)
        sa = sa.t().contiguous().t()  # outer-dim-major
        qw, sw = fp8_blocks(w, 128)
        # PyTorch's scaled_mm asked for the 128x128 block scales' outer dimension padded to a
        # multiple of 4 on the H100 run of 2026-11-24; it still refused a weight width of 256 or
        # 768 and 256 tokens with other scale shapes (recorded as `error` rows, not guessed).
        pad = (-sw.shape[0]) % 4
        if pad:
            sw = torch.cat([sw, torch.ones(pad, sw.shape[1], device=DEV)])
        sw = sw.t()  # [k/128, n/128 rounded up to 4]
        qb = qw.t()

        def fn():
            return scaled_mm(
                qa,
                qb,
                scale_a=sa,
                scale_recipe_a=ScalingType.BlockWise1x128,
                scale_b=sw,
                scale_recipe_b=ScalingType.BlockWise128x128,
                swizzle_a=SwizzleType.NO_SWIZZLE,
                swizzle_b=SwizzleType.NO_SWIZZLE,
                output_dtype=torch.bfloat16,
            )

        return fn, (lambda: a.float() @ w.float().t())
    raise ValueError(prec)


def gemm_tflops(prec, m, k, n):
    fn, _ = make_gemm(prec, m, k, n)
    ms = bench_ms(fn)
    return 2.0 * m * k * n / (ms * 1e-3) / 1e12, ms


# ---------------------------------------------------------------------------------------


def ceilings():
    n = 1 << 29  # 1 GiB of bf16
    src = randn(n)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    gbps = 2 * n * 2 / (ms * 1e-3) / 1e9
    emit("copy", bytes_moved=4 * n, ms=ms, gb_per_s=gbps)
    note(f"copy: {gbps:.0f} GB/s (read + write)")
    del src, dst
    for prec in ("bf16", "fp8_tensorwise", "fp8_blockwise"):
        try:
            tf, ms = gemm_tflops(prec, 8192, 8192, 8192)
            emit("gemm_ceiling", precision=prec, m=8192, k=8192, n=8192, ms=ms, tflops=tf)
            note(f"gemm 8192^3 {prec}: {tf:.0f} TFLOP/s")
        except Exception as e:  # noqa: BLE001 - record and go on
            emit("error", what=f"gemm_ceiling {prec}", error=repr(e)[:300])
            note(f"gemm 8192^3 {prec}: FAILED {e!r}"[:300])


def check_gemms():
    for prec in ("bf16", "fp8_tensorwise", "fp8_blockwise"):
        try:
            fn, ref = make_gemm(prec, 1024, 2048, 768)
            err = rel_err(fn(), ref())
            emit("check", what=f"gemm {prec}", rel_err=err)
            note(f"check gemm {prec}: rel err {err:.2e}")
        except Exception as e:  # noqa: BLE001
            emit("error", what=f"check gemm {prec}", error=repr(e)[:300])
            note(f"check gemm {prec}: FAILED {e!r}"[:300])


def dense_gemms():
    """Forward + both gradients of y = x W for x [M, K=4096] and W [4096, d] (and W^T)."""
    other = 4096
    for prec in ("bf16", "fp8_tensorwise", "fp8_blockwise"):
        for d in (256, 512, 768, 1024, 1536, 2048, 4096, 7168):
            for m in (256, 512, 1024, 2048, 4096, 8192, 16384):
                try:
                    shapes = [(m, other, d), (m, d, other), (other, m, d)]
                    total_ms = 0.0
                    per = []
                    for (mm, kk, nn) in shapes:
                        _, ms = gemm_tflops(prec, mm, kk, nn)
                        total_ms += ms
                        per.append(ms)
                    flops = 3 * 2.0 * m * other * d
                    tf = flops / (total_ms * 1e-3) / 1e12
                    emit("dense_gemm", precision=prec, tokens=m, weight_dim=d, other_dim=other,
                         ms_fwd=per[0], ms_dgrad=per[1], ms_wgrad=per[2], tflops=tf)
                except Exception as e:  # noqa: BLE001
                    emit("error", what=f"dense_gemm {prec} d={d} m={m}", error=repr(e)[:300])
                    note(f"dense {prec} d={d} m={m}: FAILED {e!r}"[:300])
            torch.cuda.empty_cache()
        note(f"dense gemms {prec} done")


# Expert shapes (hidden, expert FFN width) of the catalog's MoE models.
EXPERT_SHAPES = {
    "deepseek-v3": (7168, 2048),
    "qwen3-235b-a22b": (4096, 1536),
    "qwen3-30b-a3b": (2048, 768),
    "qwen3.5-35b-a3b": (2048, 512),
    "gpt-oss-120b": (2880, 2880),
    "mixtral-8x22b": (6144, 16384),
}


def grouped_offsets(experts, per_expert):
    return torch.arange(1, experts + 1, device=DEV, dtype=torch.int32) * per_expert


def grouped_check():
    e, t, k, n = 4, 256, 512, 384
    x = randn(e * t, k)
    w = randn(e, n, k)
    offs = grouped_offsets(e, t)
    out = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
    ref = torch.cat([x[i * t:(i + 1) * t].float() @ w[i].float().t() for i in range(e)])
    err = rel_err(out, ref)
    emit("check", what="grouped_mm bf16", rel_err=err)
    note(f"check grouped bf16: rel err {err:.2e}")
    try:
        qx, sx = fp8_rowwise(x)
        qw, sw = zip(*[fp8_rowwise(w[i]) for i in range(e)])
        qw = torch.stack(qw)
        sw = torch.stack([s.reshape(-1) for s in sw])
        out = torch._scaled_grouped_mm(qx, qw.transpose(-2, -1), sx.reshape(-1), sw, offs=offs,
                                       out_dtype=torch.bfloat16, use_fast_accum=True)
        err = rel_err(out, ref)
        emit("check", what="scaled_grouped_mm fp8 rowwise", rel_err=err)
        note(f"check grouped fp8: rel err {err:.2e}")
    except Exception as e:  # noqa: BLE001
        emit("error", what="check scaled_grouped_mm", error=repr(e)[:300])
        note(f"check grouped fp8: FAILED {e!r}"[:300])


def grouped_gemms():
    """Expert MLP GEMMs: fc1 [T,h]x[h,2f] (gated) and fc2 [T,f]x[f,h], fwd + bwd."""
    experts = 8
    for model, (h, f) in EXPERT_SHAPES.items():
        for per_expert in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
            tokens = experts * per_expert
            try:
                offs = grouped_offsets(experts, per_expert)
                x1 = randn(tokens, h).requires_grad_()
                w1 = randn(experts, 2 * f, h).requires_grad_()
                x2 = randn(tokens, f).requires_grad_()
                w2 = randn(experts, h, f).requires_grad_()
                g1 = randn(tokens, 2 * f)
                g2 = randn(tokens, h)

                def fwd():
                    a = torch._grouped_mm(x1, w1.transpose(-2, -1), offs=offs)
                    b = torch._grouped_mm(x2, w2.transpose(-2, -1), offs=offs)
                    return a, b

                def fwd_bwd():
                    a, b = fwd()
                    torch.autograd.backward([a, b], [g1, g2])

                flops_fwd = 2.0 * tokens * h * (2 * f) + 2.0 * tokens * f * h
                with torch.no_grad():
                    ms_f = bench_ms(lambda: fwd())
                row = dict(model=model, hidden=h, ffn=f, experts=experts,
                           tokens_per_expert=per_expert, ms_fwd=ms_f,
                           tflops_fwd=flops_fwd / (ms_f * 1e-3) / 1e12)
                try:
                    ms_fb = bench_ms(fwd_bwd)
                    row["ms_fwd_bwd"] = ms_fb
                    row["tflops_fwd_bwd"] = 3 * flops_fwd / (ms_fb * 1e-3) / 1e12
                except Exception as e:  # noqa: BLE001
                    row["bwd_error"] = repr(e)[:200]
                # FP8 forward (row-wise scales), as one number per shape.
                try:
                    with torch.no_grad():
                        qx1, sx1 = fp8_rowwise(x1.detach())
                        qw1 = torch.stack([fp8_rowwise(w1[i].detach())[0] for i in range(experts)])
                        sw1 = torch.stack([fp8_rowwise(w1[i].detach())[1].reshape(-1)
                                           for i in range(experts)])
                        qx2, sx2 = fp8_rowwise(x2.detach())
                        qw2 = torch.stack([fp8_rowwise(w2[i].detach())[0] for i in range(experts)])
                        sw2 = torch.stack([fp8_rowwise(w2[i].detach())[1].reshape(-1)
                                           for i in range(experts)])

                        def fwd8():
                            torch._scaled_grouped_mm(qx1, qw1.transpose(-2, -1), sx1.reshape(-1),
                                                     sw1, offs=offs, out_dtype=torch.bfloat16,
                                                     use_fast_accum=True)
                            torch._scaled_grouped_mm(qx2, qw2.transpose(-2, -1), sx2.reshape(-1),
                                                     sw2, offs=offs, out_dtype=torch.bfloat16,
                                                     use_fast_accum=True)

                        ms8 = bench_ms(fwd8)
                        row["ms_fwd_fp8"] = ms8
                        row["tflops_fwd_fp8"] = flops_fwd / (ms8 * 1e-3) / 1e12
                except Exception as e:  # noqa: BLE001
                    row["fp8_error"] = repr(e)[:200]
                emit("grouped_gemm", **row)
                del x1, w1, x2, w2, g1, g2
            except Exception as e:  # noqa: BLE001
                emit("error", what=f"grouped {model} {per_expert}", error=repr(e)[:300])
                note(f"grouped {model} {per_expert}: FAILED {e!r}"[:300])
                break
        torch.cuda.empty_cache()
        note(f"grouped gemms {model} done")


# Attention shapes, as cards/hardware/*.yaml `attention_kernels` key them: (name, query heads,
# key/value heads, query/key head dim, value head dim). The MHA rows follow FlashAttention-3's
# benchmark convention (hidden 2048 = heads x head dim, batch x length = 16K tokens, at least
# one sequence), so the lengths they share with its published figures can be compared; the
# MLA row is DeepSeek-V3's per-GPU shape at TP8 (16 of 128 heads, query/key 192, value 128);
# the GQA row is Qwen3-235B-A22B's at TP4 (16 query heads, one key/value head).
ATTENTION_SHAPES = [
    ("mha-d64", 32, 32, 64, 64),
    ("mha-d128", 16, 16, 128, 128),
    ("mla-d192/128", 16, 16, 192, 128),
    ("mha-d256", 8, 8, 256, 256),
    ("gqa-d128-16/1", 16, 1, 128, 128),
]
ATTENTION_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
BACKENDS = {
    "cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
    "flash": torch.nn.attention.SDPBackend.FLASH_ATTENTION,
}


def attention_inputs(b, s, hq, hkv, dqk, dv):
    q = randn(b, hq, s, dqk).requires_grad_()
    k = randn(b, hkv, s, dqk).requires_grad_()
    v = randn(b, hkv, s, dv).requires_grad_()
    return q, k, v


def sdpa(q, k, v, backend, causal=True):
    with torch.nn.attention.sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                              enable_gqa=q.shape[1] != k.shape[1])


def attention_check():
    for name, backend in BACKENDS.items():
        for (hq, hkv, dqk, dv) in ((8, 2, 128, 128), (4, 4, 192, 128), (4, 4, 64, 64)):
            for causal in (True, False):
                what = f"sdpa {name} h{hq}/{hkv} d{dqk}/{dv} causal={causal}"
                try:
                    q, k, v = attention_inputs(1, 512, hq, hkv, dqk, dv)
                    out = sdpa(q, k, v, backend, causal)
                    rep = hq // hkv
                    kr = k.float().repeat_interleave(rep, dim=1)
                    vr = v.float().repeat_interleave(rep, dim=1)
                    ref = F.scaled_dot_product_attention(q.float(), kr, vr, is_causal=causal)
                    err = rel_err(out, ref)
                    g = randn(*out.shape)
                    grads = torch.autograd.grad(out, (q, k, v), g)
                    ref_grads = torch.autograd.grad(
                        F.scaled_dot_product_attention(
                            q.float(), k.float().repeat_interleave(rep, dim=1),
                            v.float().repeat_interleave(rep, dim=1), is_causal=causal),
                        (q, k, v), g.float())
                    gerr = max(rel_err(a, b) for a, b in zip(grads, ref_grads))
                    emit("check", what=what, rel_err=err, grad_rel_err=gerr)
                    note(f"check {what}: rel err {err:.2e}, grads {gerr:.2e}")
                except Exception as e:  # noqa: BLE001
                    emit("error", what=f"check {what}", error=repr(e)[:300])
                    note(f"check {what}: FAILED {e!r}"[:300])


def attention():
    """Fused attention, forward and backward timed apart, by length, shape, mask, back end.

    FLOPs as FlashAttention-3 and cuDNN's training benchmark count them: forward
    2 x b x h x s^2 x (d_qk + d_v), halved for the causal mask; backward
    (3 d_qk + 2 d_v) / (d_qk + d_v) times the forward."""
    for shape_name, hq, hkv, dqk, dv in ATTENTION_SHAPES:
        for name, backend in BACKENDS.items():
            if name == "flash" and shape_name != "mha-d128":
                continue  # the cross-check back end, one shape
            for causal in (True, False):
                for s in ATTENTION_LENGTHS:
                    b = max(1, 16384 // s)
                    try:
                        q, k, v = attention_inputs(b, s, hq, hkv, dqk, dv)
                        g = randn(b, hq, s, dv)
                        flops_fwd = 2.0 * b * hq * s * s * (dqk + dv) * (0.5 if causal else 1.0)
                        flops_bwd = flops_fwd * (3 * dqk + 2 * dv) / (dqk + dv)
                        # Long calls take 0.1-0.6 s each: a longer budget gives the median
                        # several samples there too.
                        rep = 1000 if s >= 32768 else 200
                        with torch.no_grad():
                            ms_f = bench_ms(lambda: sdpa(q, k, v, backend, causal), rep=rep)
                        out = sdpa(q, k, v, backend, causal)
                        ms_b = bench_ms(lambda: torch.autograd.grad(out, (q, k, v), g,
                                                                    retain_graph=True), rep=rep)
                        emit("attention", shape=shape_name, backend=name, causal=causal,
                             batch=b, seq=s, q_heads=hq, kv_heads=hkv, qk_dim=dqk, v_dim=dv,
                             ms_fwd=ms_f, ms_bwd=ms_b,
                             tflops_fwd=flops_fwd / (ms_f * 1e-3) / 1e12,
                             tflops_bwd=flops_bwd / (ms_b * 1e-3) / 1e12)
                        del q, k, v, g, out
                    except Exception as e:  # noqa: BLE001
                        emit("error", what=f"attention {shape_name} {name} causal={causal} {s}",
                             error=repr(e)[:300])
                        note(f"attention {shape_name} {name} causal={causal} {s}: "
                             f"FAILED {e!r}"[:300])
                        break
                torch.cuda.empty_cache()
        note(f"attention {shape_name} done")


# Kernel calls of context-parallel attention as Transformer Engine's ring issues them (one
# microbatch, one GPU): the diagonal step is causal over the rank's block of s/R tokens, the
# other steps unmasked, either all of the block's queries against half of the keys or half
# of the queries against all of them (load-balanced halves). (name, query heads, key/value
# heads, d_qk, d_v, block tokens).
RING_CALLS = [
    # DeepSeek-V3 TP1, p2p CP4 at 16K / CP8 at 32K: all 128 heads, 4K-token blocks.
    ("dsv3 p2p block 4K", 128, 128, 192, 128, 4096),
    # DeepSeek-V3 TP1, all-to-all of 8 then a ring (64K-256K): 16 heads, 32K-token blocks.
    ("dsv3 a2a8+ring block 32K", 16, 16, 192, 128, 32768),
    # The same with the value head padded to 192: whether the unmasked MLA backward's speed
    # is the unequal head dims'.
    ("dsv3 a2a8+ring block 32K, value padded to 192", 16, 16, 192, 192, 32768),
    # Qwen3-235B-A22B TP4, p2p CP8 at 128K: 16 query heads, 1 key/value head, 16K blocks.
    ("qwen3-235b tp4 p2p block 16K", 16, 1, 128, 128, 16384),
]


def ring_calls():
    for name, hq, hkv, dqk, dv, block in RING_CALLS:
        for label, q_len, kv_len, causal in (("diagonal", block, block, True),
                                             ("full q, half kv", block, block // 2, False),
                                             ("half q, full kv", block // 2, block, False)):
            try:
                q = randn(1, hq, q_len, dqk).requires_grad_()
                k = randn(1, hkv, kv_len, dqk).requires_grad_()
                v = randn(1, hkv, kv_len, dv).requires_grad_()
                g = randn(1, hq, q_len, dv)
                backend = BACKENDS["cudnn"]
                flops_fwd = 2.0 * hq * q_len * kv_len * (dqk + dv) * (0.5 if causal else 1.0)
                flops_bwd = flops_fwd * (3 * dqk + 2 * dv) / (dqk + dv)
                with torch.no_grad():
                    ms_f = bench_ms(lambda: sdpa(q, k, v, backend, causal), rep=300)
                out = sdpa(q, k, v, backend, causal)
                ms_b = bench_ms(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True),
                                rep=300)
                emit("attention_call", case=name, step=label, q_len=q_len, kv_len=kv_len,
                     causal=causal, q_heads=hq, kv_heads=hkv, qk_dim=dqk, v_dim=dv,
                     ms_fwd=ms_f, ms_bwd=ms_b,
                     tflops_fwd=flops_fwd / (ms_f * 1e-3) / 1e12,
                     tflops_bwd=flops_bwd / (ms_b * 1e-3) / 1e12)
                note(f"{name} {label}: fwd {flops_fwd / (ms_f * 1e-3) / 1e12:.0f}, "
                     f"bwd {flops_bwd / (ms_b * 1e-3) / 1e12:.0f} TFLOP/s")
                del q, k, v, g, out
            except Exception as e:  # noqa: BLE001
                emit("error", what=f"ring call {name} {label}", error=repr(e)[:300])
                note(f"ring call {name} {label}: FAILED {e!r}"[:300])
        torch.cuda.empty_cache()


def optimizer_step():
    """Fused Adam over FP32 master weights, as a distributed optimizer's shard steps: per
    parameter it reads weight, gradient and two moments and writes weight and moments
    (28 bytes)."""
    n = 1 << 28
    params = [torch.zeros(n, device=DEV, dtype=torch.float32).normal_()]
    params[0].grad = torch.randn(n, device=DEV, dtype=torch.float32)
    opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    opt.step()
    ms = bench_ms(opt.step)
    moved = 28 * n
    emit("optimizer_step", optimizer="torch.optim.Adam fused", params=n, ms=ms,
         bytes_per_param=28, gb_per_s=moved / (ms * 1e-3) / 1e9)
    note(f"adam fused {n} params: {ms:.2f} ms, {moved / (ms * 1e-3) / 1e9:.0f} GB/s")
    del params, opt
    torch.cuda.empty_cache()


def elementwise():
    """SwiGLU on [tokens, 2f] -> [tokens, f], forward; bytes = read 2f + write f."""
    for tokens, f in ((16384, 4096), (65536, 2048)):
        x = randn(tokens, 2 * f)

        def swiglu():
            a, b = x.chunk(2, dim=-1)
            return F.silu(a) * b

        ms = bench_ms(swiglu)
        moved = tokens * 3 * f * 2
        emit("elementwise", op="swiglu eager", tokens=tokens, ffn=f, ms=ms,
             gb_per_s=moved / (ms * 1e-3) / 1e9, minimum_bytes=moved)
        note(f"swiglu eager {tokens}x{f}: {moved / (ms * 1e-3) / 1e9:.0f} GB/s")


# Gated DeltaNet as Megatron-Core's training forward calls it (megatron/core/ssm/gated_delta_net/
# gdn.py: chunk_gated_delta_rule(q, k, v, g, beta, initial_state=None, output_final_state=False,
# use_qk_l2norm_in_kernel=False); q, k already L2-normalised and repeated to the value heads).
# Under context parallelism Megatron re-shards GDN from sequence to heads, so a rank runs the
# whole sequence for its share of the heads: the sweep is by value heads and full length.
GDN_HEADS = (4, 8, 16, 32, 64)
GDN_LENGTHS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)
GDN_HEAD_DIM = 128


def gdn_inputs(b, t, h, d=GDN_HEAD_DIM, dtype=torch.bfloat16):
    q = F.normalize(randn(b, t, h, d, dtype=torch.float32), p=2, dim=-1).to(dtype)
    k = F.normalize(randn(b, t, h, d, dtype=torch.float32), p=2, dim=-1).to(dtype)
    v = randn(b, t, h, d, dtype=dtype)
    g = F.logsigmoid(torch.rand(b, t, h, device=DEV, dtype=torch.float32))
    beta = torch.rand(b, t, h, device=DEV, dtype=torch.float32).sigmoid().to(dtype)
    for x in (q, k, v, g, beta):
        x.requires_grad_()
    return q, k, v, g, beta


def gdn_check():
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule, naive_recurrent_gated_delta_rule
    q, k, v, g, beta = gdn_inputs(1, 256, 2, dtype=torch.float32)
    out, _ = chunk_gated_delta_rule(q, k, v, g, beta)
    ref, _ = naive_recurrent_gated_delta_rule(q, k, v, beta, g)
    err = rel_err(out, ref)
    emit("check", what="fla chunk_gated_delta_rule fp32 vs naive recurrent", rel_err=err)
    note(f"check gdn: rel err {err:.2e}")


def gdn():
    """Forward and backward of chunk_gated_delta_rule by value heads, length and batch."""
    import fla
    import fla.ops.common.chunk_o as chunk_o
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    import triton
    # FLA refuses the gated backward on Hopper with Triton 3.4-3.7.0 (fla-org/flash-linear-
    # attention#640: one of its kernels computes wrong gradients there). The timing is still
    # the kernels' work; with GDN_TIME_ON_OLD_TRITON=1 the refusal is lifted and every row says so.
    bypass = os.environ.get("GDN_TIME_ON_OLD_TRITON") == "1"
    if bypass:
        chunk_o.TRITON_ABOVE_3_7_1 = True
    emit("gdn_version", fla=getattr(fla, "__version__", "?"), triton=triton.__version__,
         backward_check_lifted=bypass)
    heads = tuple(int(h) for h in os.environ.get("GDN_HEADS", "").split(",") if h) or GDN_HEADS
    batch_heads = heads[0]

    def run_one(b, t, h):
        q, k, v, g, beta = gdn_inputs(b, t, h)
        do = randn(b, t, h, GDN_HEAD_DIM)
        with torch.no_grad():
            ms_f = bench_ms(lambda: chunk_gated_delta_rule(q, k, v, g, beta), rep=200)
        row = dict(batch=b, seq=t, value_heads=h, key_heads=h, qk_dim=GDN_HEAD_DIM,
                   v_dim=GDN_HEAD_DIM, ms_fwd=ms_f, ns_per_head_token_fwd=ms_f * 1e6 / (b * t * h),
                   backward_check_lifted=bypass)
        out = None
        try:
            out, _ = chunk_gated_delta_rule(q, k, v, g, beta)
            ms_b = bench_ms(lambda: torch.autograd.grad(out, (q, k, v, g, beta), do,
                                                        retain_graph=True), rep=200)
            row.update(ms_bwd=ms_b, ns_per_head_token_bwd=ms_b * 1e6 / (b * t * h))
        except Exception as e:  # noqa: BLE001 - keep the forward
            row["bwd_error"] = repr(e)[:200]
        emit("gdn", **row)
        del q, k, v, g, beta, do, out

    points = [(1, t, h) for h in heads for t in GDN_LENGTHS]
    points += [(b, 8192, batch_heads) for b in (2, 4, 8, 16)]
    points += [(1, 262144, h) for h in heads if h <= 16]
    # Cheapest first, so a run cut short by its time limit still spans the grid.
    points.sort(key=lambda p: p[0] * p[1] * p[2])
    deadline = float(os.environ.get("MICROBENCH_DEADLINE_S", "inf"))
    for (b, t, h) in points:
        if time.time() - START > deadline:
            emit("skipped", what=f"gdn b={b} t={t} h={h}", reason="MICROBENCH_DEADLINE_S")
            continue
        try:
            run_one(b, t, h)
        except Exception as e:  # noqa: BLE001
            emit("error", what=f"gdn b={b} t={t} h={h}", error=repr(e)[:300])
            note(f"gdn b={b} t={t} h={h}: FAILED {e!r}"[:300])
        torch.cuda.empty_cache()
        note(f"gdn b={b} t={t} h={h} done")


# Gated DeltaNet's other kernels, on the tensors a rank holds after Megatron-Core re-shards
# from sequence to heads (full sequence, its share of the channels): FLA's causal convolution
# (width 4, SiLU) over q, k and v together, and FLA's L2 norm of q and k per 128-wide head
# (megatron/core/ssm/gated_delta_net/common.py imports both from fla). Channels 8192 are
# Qwen3-Next's and Qwen3.5's 2 x 16 x 128 + 32 x 128 on one rank; 2048 the same at CP4.
GDN_AUX_CHANNELS = (2048, 8192)
GDN_AUX_LENGTHS = (8192, 32768, 131072)


def gdn_aux():
    try:  # the names Megatron-Core imports (FLA 0.6 keeps them as aliases)
        from fla.modules.convolution import causal_conv1d
        from fla.modules.l2norm import l2norm
    except ImportError as e:
        emit("error", what="gdn_aux imports", error=repr(e)[:300])
        note(f"gdn_aux: FAILED {e!r}"[:300])
        return
    for channels in GDN_AUX_CHANNELS:
        for t in GDN_AUX_LENGTHS:
            try:
                x = randn(1, t, channels).requires_grad_()
                w = randn(channels, 4).requires_grad_()
                g = randn(1, t, channels)
                with torch.no_grad():
                    ms_f = bench_ms(lambda: causal_conv1d(x=x, weight=w, activation="silu"),
                                    rep=200)
                out, _ = causal_conv1d(x=x, weight=w, activation="silu")
                ms_b = bench_ms(lambda: torch.autograd.grad(out, (x, w), g, retain_graph=True),
                                rep=200)
                moved = 2 * t * channels * 2  # read x, write y (BF16): the forward's minimum
                emit("gdn_aux", op="causal_conv1d silu width 4", tokens=t, channels=channels,
                     ms_fwd=ms_f, ms_bwd=ms_b, min_bytes_fwd=moved,
                     gb_per_s_fwd=moved / (ms_f * 1e-3) / 1e9)
                # q and k are half the convolved channels (the other half is v).
                qk = randn(1, t, channels // 2 // 128, 128).requires_grad_()
                with torch.no_grad():
                    ms_nf = bench_ms(lambda: l2norm(qk), rep=200)
                y = l2norm(qk)
                gy = randn(*y.shape)
                ms_nb = bench_ms(lambda: torch.autograd.grad(y, (qk,), gy, retain_graph=True),
                                 rep=200)
                emit("gdn_aux", op="l2norm per 128-wide head", tokens=t, heads=qk.shape[2],
                     ms_fwd=ms_nf, ms_bwd=ms_nb, min_bytes_fwd=2 * qk.numel() * 2,
                     gb_per_s_fwd=2 * qk.numel() * 2 / (ms_nf * 1e-3) / 1e9)
                del x, w, g, out, qk, y, gy
            except Exception as e:  # noqa: BLE001
                emit("error", what=f"gdn_aux channels={channels} t={t}", error=repr(e)[:300])
                note(f"gdn_aux channels={channels} t={t}: FAILED {e!r}"[:300])
            torch.cuda.empty_cache()
    note("gdn_aux done")


def host_copies():
    """Pinned host <-> device copies by size: each way alone, then both ways at once on two
    streams (activation offloading's steady state sends and fetches together)."""
    for size in (1 << 22, 1 << 26, 1 << 29):
        host_out = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        host_in = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(1)
        dev_src = torch.ones(size, dtype=torch.uint8, device=DEV)
        dev_dst = torch.empty(size, dtype=torch.uint8, device=DEV)
        d2h = torch.cuda.Stream()
        h2d = torch.cuda.Stream()

        def one_way_d2h():
            host_out.copy_(dev_src, non_blocking=True)

        def one_way_h2d():
            dev_dst.copy_(host_in, non_blocking=True)

        def both():
            # The copy streams wait for the timer's stream, so neither starts before its start
            # event (nor beside do_bench's cache flush); the run of 2026-11-30 lacked this, which
            # flattered its small two-way copies (4 MiB: 76.9 GB/s each way) and its 512 MiB
            # ones by at most the flush's length.
            d2h.wait_stream(torch.cuda.current_stream())
            h2d.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(d2h):
                host_out.copy_(dev_src, non_blocking=True)
            with torch.cuda.stream(h2d):
                dev_dst.copy_(host_in, non_blocking=True)
            torch.cuda.current_stream().wait_stream(d2h)
            torch.cuda.current_stream().wait_stream(h2d)

        ms_d2h = bench_ms(one_way_d2h, rep=200)
        ms_h2d = bench_ms(one_way_h2d, rep=200)
        ms_both = bench_ms(both, rep=200)
        emit("host_copy", bytes=size, ms_d2h=ms_d2h, ms_h2d=ms_h2d, ms_both=ms_both,
             gb_per_s_d2h=size / (ms_d2h * 1e-3) / 1e9, gb_per_s_h2d=size / (ms_h2d * 1e-3) / 1e9,
             gb_per_s_both_each_way=size / (ms_both * 1e-3) / 1e9)
        note(f"host copy {size >> 20} MiB: d2h {size / (ms_d2h * 1e-3) / 1e9:.1f}, "
             f"h2d {size / (ms_h2d * 1e-3) / 1e9:.1f}, both {size / (ms_both * 1e-3) / 1e9:.1f} "
             "GB/s each way")
        del host_out, host_in, dev_src, dev_dst


def host_adam():
    """torch.optim.AdamW(fused=True) on the host over FP32 parameters, as Megatron-Core's
    HybridDeviceOptimizer steps an offloaded shard, by thread count."""
    import platform
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    emit("host", cpu=cpu, logical_cpus=os.cpu_count(), machine=platform.machine())
    n = 1 << 26
    params = [torch.randn(n, dtype=torch.float32)]
    params[0].grad = torch.randn(n, dtype=torch.float32)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    default_threads = torch.get_num_threads()
    for threads in (1, 2, 4, 8, 16):
        if threads > (os.cpu_count() or 1):
            break
        torch.set_num_threads(threads)
        opt.step()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
        s = sorted(times)[len(times) // 2]
        emit("host_adam", optimizer="torch.optim.AdamW fused (CPU)", params=n, threads=threads,
             s=s, params_per_s=n / s, gb_per_s=n * 36 / s / 1e9)
        note(f"host adamw fused, {threads} threads: {n / s / 1e9:.2f} G params/s")
    torch.set_num_threads(default_threads)
    del params, opt


# Each step a command line can name, and what it runs, in order.
STEPS = {
    "ceilings": [ceilings],
    "checks": [check_gemms, grouped_check, attention_check],
    "dense": [dense_gemms],
    "grouped": [grouped_gemms],
    "attention": [attention],
    "elementwise": [elementwise],
    "optimizer": [optimizer_step],
    "ring": [ring_calls],
    "gdn_check": [gdn_check],
    "gdn": [gdn],
    "gdn_aux": [gdn_aux],
    "host": [host_copies, host_adam],
}


def main():
    props = torch.cuda.get_device_properties(0)
    try:
        import subprocess
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        smi = repr(e)[:200]
    emit("device", name=props.name, sms=props.multi_processor_count, nvidia_smi=smi,
         memory_gib=props.total_memory / 2**30, torch=torch.__version__,
         cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    note(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}")
    torch.manual_seed(0)
    steps = sys.argv[1:] or [
        "ceilings", "checks", "attention", "ring", "optimizer", "elementwise", "grouped", "dense"]
    for step in steps:
        if step not in STEPS:
            note(f"unknown step {step!r}; steps: {', '.join(STEPS)}")
            continue
        for run in STEPS[step]:
            run()
    note("done")


if __name__ == "__main__":
    main()
