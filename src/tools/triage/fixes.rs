//! `triage_oom`'s candidate fixes: settings that would make `after` fit (revert the root
//! cause's group, the cheapest recompute that fits, more parallelism, activation offloading
//! by module or by whole layers),
//! each evaluated on `after` and ranked by its predicted cost.

use super::*;

pub(super) fn fixes_for(
    catalog: &Catalog,
    after: &TrainingConfig,
    after_est: &Estimate,
    causes: &[Cause],
) -> Vec<Fix> {
    let cards = catalog.cost();
    let mut candidates: Vec<(String, TrainingConfig)> = Vec::new();
    // Revert the root cause's group.
    if let Some(root) = causes.first() {
        let group = group_of(&root.field);
        let reverted: Vec<SettingChange> = causes
            .iter()
            .filter(|c| group_of(&c.field) == group)
            .map(|c| SettingChange {
                field: c.field.clone(),
                before: Some(c.after.clone()).filter(|v| !v.is_null()),
                after: Some(c.before.clone()).filter(|v| !v.is_null()),
            })
            .collect();
        if let Ok(cfg) = apply_changes(after, &reverted) {
            candidates.push((format!("revert the root cause ({group})"), cfg));
        }
    }
    // The cheapest recompute setting that fits.
    if let Ok(choice) = choose_recompute(
        catalog,
        ChooseRecomputeInput {
            config: after.clone(),
            memory_budget_gib: None,
        },
    ) {
        if choice.fits {
            candidates.push((
                format!("recompute: {}", recompute_label(&choice.config)),
                choice.config,
            ));
        }
    }
    // Twice the CP (DP halves), when the GPUs allow it.
    // Layout products in u64: each size is bounded, their product need not fit in u32.
    let cp2 = after.cp().saturating_mul(2);
    let mut with_cp = after.clone();
    with_cp.context_parallel_size = Some(cp2);
    if let (Some(gpus), Some(gbs)) = (after.num_gpus, after.global_batch_size) {
        let model_parallel = u64::from(after.tp())
            .saturating_mul(u64::from(cp2))
            .saturating_mul(u64::from(after.pp()))
            .max(1);
        let dp = u64::from(gpus) / model_parallel;
        let step = dp.saturating_mul(u64::from(after.mbs())).max(1);
        if dp >= 1 && u64::from(gbs) % step != 0 {
            let rounded = u64::from(gbs).div_ceil(step).saturating_mul(step);
            with_cp.global_batch_size = u32::try_from(rounded).ok().or(Some(gbs));
        }
    }
    candidates.push((
        format!("raise CP to {cp2} (call size_cp to confirm)"),
        with_cp,
    ));
    if !after.optimizer_cpu_offload.unwrap_or(false) {
        let mut c = after.clone();
        c.optimizer_cpu_offload = Some(true);
        c.optimizer_offload_fraction = Some(1.0);
        // Megatron-LM's offload README pairs it with the precision-aware optimizer, which
        // moves the fp32 master copy to the host too (without it the master stays on the GPU).
        c.use_precision_aware_optimizer = Some(true);
        candidates.push((
            "offload the optimizer to the CPU (with use_precision_aware_optimizer)".into(),
            c,
        ));
    }
    candidates.extend(activation_offload_fixes(cards, after));
    candidates.extend(layer_offload_fix(cards, after));
    if !after.linear_cross_entropy.unwrap_or(false)
        && after_est.memory.breakdown_gib.logits_loss > 1.0
    {
        let mut c = after.clone();
        c.linear_cross_entropy = Some(true);
        candidates.push((
            "stream the loss over the vocabulary (linear cross entropy)".into(),
            c,
        ));
    }
    if after.data_parallel_sharding_strategy.is_none() {
        let mut c = after.clone();
        c.use_megatron_fsdp = Some(true);
        c.data_parallel_sharding_strategy = Some(FsdpStrategy::OptimGradsParams);
        candidates.push((
            "shard parameters, gradients and optimizer with Megatron-FSDP".into(),
            c,
        ));
    }
    let mut fixes: Vec<Fix> = candidates
        .into_iter()
        .filter_map(|(description, cfg)| {
            let est = evaluate_config(cards, &cfg).ok()?;
            if layout_violations(&est).next().is_some() {
                return None;
            }
            Some(Fix {
                description,
                settings: changed_settings(after, &cfg),
                fits: est.fits,
                peak_gib: round(est.memory.peak_gib, 2),
                step_time_delta_s: round(
                    est.performance.step_time_s - after_est.performance.step_time_s,
                    3,
                ),
                model_tflops_per_gpu: round(est.performance.model_tflops_per_gpu, 1),
            })
        })
        .collect();
    fixes.sort_by(|a, b| {
        b.fits
            .cmp(&a.fits)
            .then(a.step_time_delta_s.total_cmp(&b.step_time_delta_s))
    });
    // Two routes to the same settings (reverting, or the recompute search finding the old
    // list again) are one fix.
    let mut seen: Vec<Map<String, Value>> = Vec::new();
    fixes.retain(|fix| {
        let duplicate = seen.contains(&fix.settings);
        seen.push(fix.settings.clone());
        !duplicate
    });
    fixes
}

/// Fine-grained activation offloading for a run that offloads nothing yet, two ways: the
/// attention pair `core_attn` and `attn_proj` with the routed experts' `expert_fc1`, Megatron-
/// LM's own example (docs/user-guide/features/fine_grained_activation_offloading.md, d98e8a64),
/// which frees the most; and `core_attn` with `expert_fc1` alone, whose core-attention reload
/// the backward up to the experts can hide (next to `attn_proj` nothing hides it:
/// `estimate/time/offload.rs`). Each leaves out what would free nothing or Megatron-Core
/// refuses: the attention modules under `core_attn` recompute (the checkpointed attention
/// runs outside the offload scope), the experts in a dense model or a `moe`-recomputed layer,
/// everything under full recompute. With CUDA graphs the same page asks for Transformer
/// Engine graphs whose scope holds `attn` and `moe_router`; other graphed runs get none.
/// Evaluated like every fix, so each carries its copies' step time.
fn activation_offload_fixes(
    cards: &CostCards,
    cfg: &TrainingConfig,
) -> Vec<(String, TrainingConfig)> {
    if cfg
        .offload_modules
        .as_deref()
        .is_some_and(|m| !m.is_empty())
        || cfg.full_recompute()
    {
        return Vec::new();
    }
    let scopes = cfg.cuda_graph_scopes();
    let graphs_allow = scopes.is_empty()
        || (cfg.cuda_graph_impl == Some(CudaGraphImpl::TransformerEngine)
            && scopes.contains(&CudaGraphScope::Attn)
            && scopes.contains(&CudaGraphScope::MoeRouter));
    if !graphs_allow {
        return Vec::new();
    }
    let Ok(resolved) = resolve(cards, cfg) else {
        return Vec::new();
    };
    let attention = !cfg.has_recompute(&RecomputeModule::CoreAttn);
    let experts = resolved.arch.moe.is_some() && !cfg.has_recompute(&RecomputeModule::Moe);
    let experts_module: &[&str] = if experts { &["expert_fc1"] } else { &[] };
    let mut sets: Vec<Vec<&str>> = Vec::new();
    if attention {
        sets.push([&["core_attn", "attn_proj"][..], experts_module].concat());
        sets.push([&["core_attn"][..], experts_module].concat());
    } else if experts {
        sets.push(experts_module.to_vec());
    }
    sets.into_iter()
        .map(|modules| {
            let mut offloading = cfg.clone();
            offloading.offload_modules = Some(modules.iter().map(|m| m.to_string()).collect());
            (
                format!(
                    "offload activations to the host (fine_grained_activation_offloading with offload_modules {})",
                    modules.join(", ")
                ),
                offloading,
            )
        })
        .collect()
}

/// Whole-layer activation offloading (`cpu_offloading`) where Megatron-Core allows it (one
/// pipeline stage, no recompute, no fine-grained offloading): the fewest of the model's layers,
/// beyond those already offloaded, whose offload makes the run fit, found by bisection (the
/// peak falls as layers leave); the most it may offload (all but the last layer) when none
/// fits, so the answer still shows how far it goes.
fn layer_offload_fix(cards: &CostCards, cfg: &TrainingConfig) -> Option<(String, TrainingConfig)> {
    let fine_grained = cfg
        .offload_modules
        .as_deref()
        .is_some_and(|m| !m.is_empty());
    if cfg.pp() > 1 || cfg.recompute_granularity.is_some() || fine_grained {
        return None;
    }
    let layers = resolve(cards, cfg).ok()?.arch.num_layers;
    let most = layers.checked_sub(1)?;
    let already = cfg.offloaded_layers();
    if already >= most {
        return None;
    }
    let offloading = |n: u32| {
        let mut c = cfg.clone();
        c.cpu_offloading = Some(true);
        c.cpu_offloading_num_layers = Some(n);
        if c.cpu_offloading_activations == Some(false) {
            c.cpu_offloading_activations = Some(true);
        }
        c
    };
    let fits = |n: u32| evaluate_config(cards, &offloading(n)).is_ok_and(|e| e.fits);
    let chosen = if fits(most) {
        // The smallest count in (already, most] that fits.
        let (mut low, mut high) = (already + 1, most);
        while low < high {
            let mid = low + (high - low) / 2;
            if fits(mid) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        high
    } else {
        most
    };
    Some((
        format!(
            "offload the activations of the first {chosen} of the {layers} layers to the host \
             (cpu_offloading with cpu_offloading_num_layers {chosen})"
        ),
        offloading(chosen),
    ))
}

fn changed_settings(from: &TrainingConfig, to: &TrainingConfig) -> Map<String, Value> {
    config_changes(from, to)
        .into_iter()
        .map(|c| (c.field, c.after.unwrap_or(Value::Null)))
        .collect()
}
