//! `choose_recompute`: the cheapest recompute setting that fits a memory budget.
//!
//! Every selective module list the model can use is evaluated, then full recompute with a
//! growing number of layers per group. The winner is the fastest setting under the budget;
//! core-attention recompute is held back at long context (fused attention saves little memory
//! there and replays the CP ring), as the skills advise.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    citations, layout_violations, recompute_label, resolve, round, Citation, InputNotes, ToolError,
};
use crate::catalog::Catalog;
use crate::model::config::{RecomputeGranularity, RecomputeMethod, RecomputeModule};
use crate::model::{evaluate, Architecture, Estimate, TrainingConfig};

/// From this sequence length on, core_attn recompute is only a last resort.
const LONG_CONTEXT_TOKENS: u64 = 32_768;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct ChooseRecomputeInput {
    /// The training configuration (its own recompute fields are replaced).
    pub config: TrainingConfig,
    /// Memory budget per GPU in GiB (default: the GPU's usable memory).
    #[serde(default)]
    pub memory_budget_gib: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecomputeOption {
    pub recompute_granularity: Option<RecomputeGranularity>,
    pub recompute_modules: Vec<String>,
    pub recompute_method: Option<RecomputeMethod>,
    pub recompute_num_layers: Option<u32>,
    pub label: String,
    pub fits: bool,
    pub peak_gib: f64,
    /// Saving against no recompute, GiB.
    pub memory_saving_gib: f64,
    pub step_time_s: f64,
    /// Extra step time against no recompute, percent.
    pub time_overhead_pct: f64,
    pub model_tflops_per_gpu: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChooseRecomputeOutput {
    #[serde(flatten)]
    pub notes: InputNotes,
    pub recompute_granularity: Option<RecomputeGranularity>,
    pub recompute_modules: Vec<String>,
    pub recompute_method: Option<RecomputeMethod>,
    pub recompute_num_layers: Option<u32>,
    pub fits: bool,
    pub peak_gib: f64,
    pub memory_budget_gib: f64,
    pub memory_saving_gib: f64,
    pub time_overhead_pct: f64,
    /// The input configuration with the chosen setting.
    pub config: TrainingConfig,
    /// Every setting evaluated, chosen first, then fitting ones by speed, then the rest by memory.
    pub alternatives: Vec<RecomputeOption>,
    pub rationale: String,
    pub citations: Vec<Citation>,
}

/// Selective modules that do something for this architecture, cheapest per GiB first.
pub fn applicable_modules(arch: &Architecture) -> Vec<RecomputeModule> {
    let mut modules = vec![RecomputeModule::Layernorm];
    if let Some(moe) = &arch.moe {
        modules.push(RecomputeModule::MoeAct);
        if moe.shared_expert_ffn_hidden_size > 0 {
            modules.push(RecomputeModule::SharedExperts);
        }
    }
    if arch.mla.is_some() {
        modules.push(RecomputeModule::MlaUpProj);
    }
    if arch.linear_attention.is_some() {
        modules.push(RecomputeModule::GdnNormOut);
    }
    if arch.has_dense_mlp_layers() {
        modules.push(RecomputeModule::Mlp);
    }
    if arch.moe.is_some() {
        modules.push(RecomputeModule::Moe);
    }
    modules.push(RecomputeModule::CoreAttn);
    modules
}

/// Every recompute setting worth evaluating: all selective subsets (modules that `moe`
/// subsumes are dropped from lists containing it) and full recompute with 1..=stage layers.
pub fn recompute_settings(arch: &Architecture, cfg: &TrainingConfig) -> Vec<TrainingConfig> {
    let modules = applicable_modules(arch);
    let mut settings = Vec::new();
    let mut none = cfg.clone();
    none.recompute_granularity = None;
    none.recompute_modules = None;
    none.recompute_method = None;
    none.recompute_num_layers = None;
    settings.push(none.clone());
    for mask in 1u32..(1 << modules.len()) {
        let chosen: Vec<RecomputeModule> = modules
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, m)| m.clone())
            .collect();
        let has_moe = chosen.contains(&RecomputeModule::Moe);
        if has_moe
            && chosen
                .iter()
                .any(|m| matches!(m, RecomputeModule::MoeAct | RecomputeModule::SharedExperts))
        {
            continue;
        }
        let mut s = none.clone();
        s.recompute_granularity = Some(RecomputeGranularity::Selective);
        s.recompute_modules = Some(chosen);
        settings.push(s);
    }
    let pp = cfg.pp().max(1);
    let vpp = cfg.vpp().max(1);
    let layers_per_chunk = (arch.num_layers / (pp * vpp)).max(1);
    for method in [RecomputeMethod::Uniform, RecomputeMethod::Block] {
        let mut layers = 1;
        while layers <= layers_per_chunk {
            let mut s = none.clone();
            s.recompute_granularity = Some(RecomputeGranularity::Full);
            s.recompute_method = Some(method);
            s.recompute_num_layers = Some(layers);
            settings.push(s);
            layers *= 2;
        }
    }
    settings
}

fn option_of(
    cfg: &TrainingConfig,
    est: &Estimate,
    baseline: &Estimate,
    budget: f64,
) -> RecomputeOption {
    let base_time = baseline.performance.step_time_s.max(f64::MIN_POSITIVE);
    RecomputeOption {
        recompute_granularity: cfg.recompute_granularity,
        recompute_modules: cfg
            .recompute_modules()
            .iter()
            .map(|m| m.name().to_string())
            .collect(),
        recompute_method: cfg.recompute_method,
        recompute_num_layers: cfg.recompute_num_layers,
        label: recompute_label(cfg),
        fits: layout_violations(est).next().is_none() && est.memory.peak_gib <= budget,
        peak_gib: round(est.memory.peak_gib, 2),
        memory_saving_gib: round(baseline.memory.peak_gib - est.memory.peak_gib, 2),
        step_time_s: round(est.performance.step_time_s, 3),
        time_overhead_pct: round((est.performance.step_time_s / base_time - 1.0) * 100.0, 2),
        model_tflops_per_gpu: round(est.performance.model_tflops_per_gpu, 1),
    }
}

pub fn choose_recompute(
    catalog: &Catalog,
    input: ChooseRecomputeInput,
) -> Result<ChooseRecomputeOutput, ToolError> {
    let cards = catalog.cost();
    crate::model::limits::check_config(&input.config, "config.")?;
    let r = resolve(cards, &input.config)?;
    let usable = r.hardware.memory_gib_usable;
    // A budget above what the GPU offers cannot make anything fit that the GPU cannot hold:
    // it is capped to the card's usable memory, and the answer says so.
    let mut capped_note = None;
    let budget = match input.memory_budget_gib {
        Some(b) if b.is_finite() && b > usable => {
            capped_note = Some(format!(
                "{b} GiB is more than the {usable} GiB usable on {}; the budget is capped to {usable} GiB",
                r.hardware.display_name
            ));
            usable
        }
        Some(b) if b.is_finite() && b > 0.0 => b,
        Some(b) => {
            return Err(ToolError::field(
                "memory_budget_gib",
                format!("{b} is not a positive number of GiB"),
                "give the per-GPU budget, e.g. 72, or leave it out to use the GPU's memory",
            ))
        }
        None => r.hardware.memory_gib_usable,
    };
    let settings = recompute_settings(&r.arch, &input.config);
    let estimates: Vec<(TrainingConfig, Estimate)> = settings
        .into_iter()
        .map(|cfg| {
            let est = evaluate(&r.arch, r.hardware, r.constants, &cfg);
            (cfg, est)
        })
        .collect();
    let Some((_, baseline)) = estimates.first() else {
        return Err(ToolError::Infeasible(
            "no recompute setting to evaluate".into(),
        ));
    };
    if let Some(v) = layout_violations(baseline).next() {
        return Err(ToolError::Infeasible(format!(
            "the layout is invalid before recompute matters: {} Fix: {}",
            v.message, v.fix
        )));
    }
    let baseline = baseline.clone();
    let long_context = input.config.seq_length.unwrap_or(0) >= LONG_CONTEXT_TOKENS;
    let uses_core_attn = |cfg: &TrainingConfig| cfg.has_recompute(&RecomputeModule::CoreAttn);
    let mut options: Vec<(RecomputeOption, &TrainingConfig)> = estimates
        .iter()
        .map(|(cfg, est)| (option_of(cfg, est, &baseline, budget), cfg))
        .collect();
    // Fitting settings by step time (fewer modules break ties); at long context core_attn
    // settings go after every other fitting one.
    options.sort_by(|(a, ca), (b, cb)| {
        b.fits
            .cmp(&a.fits)
            .then_with(|| {
                if a.fits && long_context {
                    uses_core_attn(ca).cmp(&uses_core_attn(cb))
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .then_with(|| {
                if a.fits {
                    a.step_time_s.total_cmp(&b.step_time_s)
                } else {
                    a.peak_gib.total_cmp(&b.peak_gib)
                }
            })
            .then(a.recompute_modules.len().cmp(&b.recompute_modules.len()))
    });
    let Some((chosen, chosen_cfg)) = options.first().cloned() else {
        return Err(ToolError::Infeasible(
            "no recompute setting to evaluate".into(),
        ));
    };
    let mut config = chosen_cfg.clone();
    if config
        .recompute_modules
        .as_ref()
        .is_some_and(|m| m.is_empty())
    {
        config.recompute_modules = None;
    }
    let mut notes = InputNotes::for_config(catalog.cost(), &input.config, None);
    notes.note_calibration(catalog.cost(), input.config.hardware.as_deref());
    if let Some(note) = capped_note {
        notes.ignore("memory_budget_gib", note);
    }
    notes
        .assumed_defaults
        .retain(|a| a.key != "recompute_granularity");
    if input.config.recompute_granularity.is_some() || input.config.recompute_modules.is_some() {
        notes.ignore(
            "recompute_granularity / recompute_modules",
            "choose_recompute replaces the given recompute setting with the one it chooses",
        );
    }
    let rationale =
        recompute_rationale(&chosen, &baseline, budget, long_context, &options) + &notes.markdown();
    let alternatives: Vec<RecomputeOption> =
        options.iter().take(12).map(|(o, _)| o.clone()).collect();
    Ok(ChooseRecomputeOutput {
        notes,
        recompute_granularity: chosen.recompute_granularity,
        recompute_modules: chosen.recompute_modules.clone(),
        recompute_method: chosen.recompute_method,
        recompute_num_layers: chosen.recompute_num_layers,
        fits: chosen.fits,
        peak_gib: chosen.peak_gib,
        memory_budget_gib: round(budget, 2),
        memory_saving_gib: chosen.memory_saving_gib,
        time_overhead_pct: chosen.time_overhead_pct,
        config,
        alternatives,
        rationale,
        citations: citations(
            catalog,
            &[
                ("moe-parallelism-and-recompute", "recompute modules"),
                ("moe-long-context", "selective vs full"),
                ("moe-optimization-workflow", "phase 1"),
            ],
        ),
    })
}

fn recompute_rationale(
    chosen: &RecomputeOption,
    baseline: &Estimate,
    budget: f64,
    long_context: bool,
    options: &[(RecomputeOption, &TrainingConfig)],
) -> String {
    let fitting = options.iter().filter(|(o, _)| o.fits).count();
    let mut text = format!(
        "Without recompute the worst rank needs {:.1} GiB against a budget of {:.1} GiB. {} of {} settings fit.",
        baseline.memory.peak_gib,
        budget,
        fitting,
        options.len()
    );
    if chosen.fits {
        text.push_str(&format!(
            "\n\nCheapest that fits: **{}**: {:.1} GiB (saves {:.1} GiB) for {:+.1}% step time.",
            chosen.label, chosen.peak_gib, chosen.memory_saving_gib, chosen.time_overhead_pct
        ));
    } else {
        text.push_str(&format!(
            "\n\nNothing fits; the leanest setting, **{}**, still needs {:.1} GiB. Add CP or PP, offload the optimizer, or shard it with FSDP (call `triage_oom` or `plan_layouts`).",
            chosen.label, chosen.peak_gib
        ));
    }
    if long_context {
        text.push_str("\n\nAt this length core_attn recompute is kept as a last resort: fused attention saves only Q/K/V/O, and recomputing it replays the CP ring exchange.");
    }
    text
}
