//! Human-readable report of an [`Estimate`] (the CLI's non-JSON output).

use std::fmt::Write;

use super::estimate::Estimate;

fn row(out: &mut String, label: &str, value: f64, unit: &str, total: f64) {
    let share = if total > 0.0 {
        value / total * 100.0
    } else {
        0.0
    };
    let _ = writeln!(out, "  {label:<24} {value:>10.2} {unit:<4} {share:>5.1}%");
}

/// Render an estimate as aligned text tables. The warnings are left to the rationale printed
/// after it (`check_feasibility`'s "Note:" lines), so that each is printed once.
pub fn render_text(e: &Estimate) -> String {
    let mut out = String::new();
    let l = &e.layout;
    // A configuration Megatron would refuse does not "not fit": say what it is, so a peak
    // below the capacity is not read as a memory failure.
    let memory_fits = e.memory.peak_gib <= e.memory.capacity_gib;
    let verdict = match (e.fits, e.violations.first()) {
        (true, _) => "FITS".to_string(),
        (false, Some(v)) if memory_fits => format!("INVALID ({}; memory would fit)", v.code),
        (false, Some(v)) => format!("DOES NOT FIT, and INVALID ({})", v.code),
        (false, None) => "DOES NOT FIT".to_string(),
    };
    let _ = writeln!(
        out,
        "{verdict}: {:.1} GiB peak (reserved) of {:.1} GiB usable; {:.1} GiB allocated",
        e.memory.peak_gib, e.memory.capacity_gib, e.memory.allocated_gib
    );
    let cp_comm = match (l.cp_all_to_all_size, l.cp_ring_size) {
        _ if l.cp <= 1 => String::new(),
        (1, ring) => format!(" (ring of {ring})"),
        (a2a, 1) => format!(" (all-to-all of {a2a})"),
        (a2a, ring) => format!(" (all-to-all of {a2a} in a ring of {ring})"),
    };
    let _ = writeln!(
        out,
        "Layout: {} GPUs  TP{} CP{}{cp_comm} PP{} VPP{} EP{} ETP{}  DP{} EDP{}  seq {}  MBS{} GBS{} ({} microbatches)",
        l.num_gpus, l.tp, l.cp, l.pp, l.vpp, l.ep, l.etp, l.dp, l.edp, l.seq_length,
        l.micro_batch_size, l.global_batch_size, l.microbatches
    );
    let _ = writeln!(
        out,
        "        local tokens per GPU {}  precision {}  dispatcher {}  MTP {}",
        l.local_tokens_per_gpu,
        l.precision.unwrap_or_default(),
        l.dispatcher
            .map(|d| d.to_string())
            .unwrap_or_else(|| "-".into()),
        l.mtp_layers
    );
    if !e.violations.is_empty() {
        let _ = writeln!(out, "\nViolations:");
        for v in &e.violations {
            let _ = writeln!(out, "  [{}] {}\n      fix: {}", v.code, v.message, v.fix);
        }
    }
    let m = &e.memory;
    let _ = writeln!(
        out,
        "\nMemory on pipeline rank {} ({}):",
        m.worst_rank.pipeline_rank, m.worst_rank.reason
    );
    let b = &m.breakdown_gib;
    let total = m.peak_gib;
    for (label, value) in [
        ("weights", b.weights),
        ("gradients", b.gradients),
        ("optimizer", b.optimizer),
        ("fsdp buffers", b.fsdp_buffers),
        ("fp8 weight copies", b.fp8_weight_copies),
        ("activations", b.activations),
        ("backward working set", b.backward_working_set),
        ("logits / loss", b.logits_loss),
        ("moe dispatch", b.moe_dispatch),
        ("cuda graph pool", b.cuda_graph_pool),
    ] {
        row(&mut out, label, value, "GiB", total);
    }
    let _ = writeln!(
        out,
        "  {:<24} {:>10.2} GiB         = log's `max allocated` (torch.cuda.max_memory_allocated)",
        "allocated", m.allocated_gib
    );
    row(&mut out, "fragmentation", b.fragmentation, "GiB", total);
    let _ = writeln!(
        out,
        "  {:<24} {:>10.2} GiB         = log's `max reserved`",
        "reserved by allocator",
        m.allocated_gib + b.fragmentation
    );
    for (label, value) in [
        ("dispatcher buffers", b.dispatcher_buffers),
        ("fixed reserve", b.fixed_reserve),
    ] {
        row(&mut out, label, value, "GiB", total);
    }
    let _ = writeln!(
        out,
        "  {:<24} {:>10.2} GiB         = device memory used (nvidia-smi); fits are judged on it",
        "peak (reserved)", total
    );
    if m.per_rank_peak_gib.len() > 1 {
        let ranks: Vec<String> = m
            .per_rank_peak_gib
            .iter()
            .zip(&m.per_rank_allocated_gib)
            .map(|(p, a)| format!("{a:.1}/{p:.1}"))
            .collect();
        let _ = writeln!(
            out,
            "  per pipeline rank, allocated/peak GiB: {}",
            ranks.join("  ")
        );
    }
    let a = &m.activations_by_module_gib;
    // Only a backend that materialises the score matrix keeps attention scores.
    let scores = if a.attention_scores > 0.0 {
        format!(", attention scores {:.2}", a.attention_scores)
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "  activations by module: input {:.2}, norms {:.2}, attention {:.2}{scores}, mlp {:.2}, moe dispatch {:.2}, experts {:.2}, shared {:.2} GiB",
        a.layer_input, a.layernorm, a.attention, a.mlp, a.moe_dispatch, a.moe_experts, a.shared_experts
    );
    let p = &e.performance;
    let _ = writeln!(
        out,
        "\nPerformance: {:.0} model TFLOP/s/GPU{} ({}), {:.0} tokens/s/GPU, step {:.2} s{} (pipeline rank {} sets the pace)",
        p.model_tflops_per_gpu,
        p.band_text(),
        p.mfu_text(),
        p.tokens_per_second_per_gpu,
        p.step_time_s,
        p.step_band_text(),
        p.bottleneck_rank
    );
    let t = &p.breakdown_s;
    for (label, value) in [
        ("gemm", t.gemm),
        ("attention", t.attention),
        ("element-wise", t.elementwise),
        ("recompute", t.recompute),
        ("host overhead", t.host_overhead),
        ("tp comm (exposed)", t.tp_comm),
        ("cp comm (exposed)", t.cp_comm),
        ("ep comm (exposed)", t.ep_comm),
        ("pp comm", t.pp_comm),
        ("dp comm (exposed)", t.dp_comm),
        ("offload copies (exposed)", t.offload_copies),
        ("pipeline bubble", t.pipeline_bubble),
        ("optimizer", t.optimizer),
    ] {
        row(&mut out, label, value, "s", p.step_time_s);
    }
    if let Some(block) = &p.moe_block {
        let ms = 1e3;
        let _ = writeln!(
            out,
            "  one MoE block (one layer, one microbatch, alone: no overlap, no host time): forward {:.2} ms, backward {:.2} ms = routed GEMMs {:.2} + shared GEMMs {:.2} + element-wise {:.2} + all-to-all {:.2} ms",
            block.forward_s * ms,
            block.backward_s * ms,
            block.routed_expert_gemm_s * ms,
            block.shared_expert_gemm_s * ms,
            block.elementwise_s * ms,
            block.all_to_all_s * ms,
        );
        if let Some(band) = &block.measured_against {
            let _ = writeln!(
                out,
                "    priced with GEMM efficiencies fitted on whole steps: {}",
                band.text()
            );
        }
    }
    let f = &e.flops;
    let _ = writeln!(
        out,
        "\nFLOPs: {:.1} GFLOP/token (dense GEMM {:.1}, experts {:.1}, attention {:.1}, linear attention and Mamba scan {:.1}, MTP {:.1}, logits {:.1}); recompute adds {:.1}; {:.1}B parameters",
        f.gflop_per_token,
        f.breakdown_gflop_per_token.dense_gemm,
        f.breakdown_gflop_per_token.routed_experts,
        f.breakdown_gflop_per_token.attention_core,
        f.breakdown_gflop_per_token.linear_attention_core,
        f.breakdown_gflop_per_token.mtp,
        f.breakdown_gflop_per_token.logits,
        f.recompute_gflop_per_token,
        f.total_params_billion
    );
    out
}

/// A sequence length as the recipes write it: 131072 → "128K", 1048576 → "1M", 5000 → "5000".
pub fn tokens_label(tokens: u64) -> String {
    const K: u64 = 1024;
    if tokens >= K * K && tokens.is_multiple_of(K * K) {
        format!("{}M", tokens / (K * K))
    } else if tokens >= K && tokens.is_multiple_of(K) {
        format!("{}K", tokens / K)
    } else {
        tokens.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::tokens_label;

    #[test]
    fn sequence_lengths_read_as_the_recipes_write_them() {
        assert_eq!(tokens_label(4096), "4K");
        assert_eq!(tokens_label(131072), "128K");
        assert_eq!(tokens_label(1 << 20), "1M");
        assert_eq!(tokens_label(1536 * 1024), "1536K");
        assert_eq!(tokens_label(5000), "5000");
        assert_eq!(tokens_label(0), "0");
    }
}
