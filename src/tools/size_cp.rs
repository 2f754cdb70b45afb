//! `size_cp`: how large context parallelism should be for a sequence length.
//!
//! Starts from the skills' rule of thumb (CP ≈ seq/4096, rounded up to a power of two), then
//! asks the cost model: for every power-of-two CP the GPUs allow, the best layout of the other
//! dimensions is searched, and the CP with the highest predicted throughput that fits wins.
//! Candidates within a few percent of the best are treated as ties and the one nearest the rule
//! of thumb is taken: a difference that small is well inside the model's error band (±8–24% by
//! regime, `cards/time-uncertainty.yaml`), so it is no reason to leave the rule.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    citations, layout_label, levers_label, next_power_of_two, recompute_label, resolve, Citation,
    InputNotes, Prediction, ToolError,
};
use super::plan::{search, search_base, search_notes, LayoutConstraints, SearchRequest};
use crate::catalog::Catalog;
use crate::model::{ModelSpec, Precision, TrainingConfig};

/// Tokens per CP rank the rule of thumb aims for.
const RULE_OF_THUMB_TOKENS_PER_CP_RANK: u64 = 4096;
/// Throughput within this fraction of the best counts as a tie.
const TIE_FRACTION: f64 = 0.03;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct SizeCpInput {
    /// Model card id or HuggingFace config.json object.
    pub model: ModelSpec,
    pub seq_length: u64,
    /// Hardware card id (default h100).
    #[serde(default)]
    pub hardware: Option<String>,
    pub num_gpus: u32,
    /// Fix TP (default: 1, or searched on NVL72 systems where TP can trade for CP).
    #[serde(default, alias = "tp")]
    pub tensor_model_parallel_size: Option<u32>,
    #[serde(default)]
    pub precision: Option<Precision>,
    #[serde(default)]
    pub global_batch_size: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CpAlternative {
    pub context_parallel_size: u32,
    pub local_seq_length: u64,
    /// Best layout found with this CP (absent when no layout passes the rules).
    pub layout: Option<String>,
    pub recompute: Option<String>,
    pub predicted: Option<Prediction>,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SizeCpOutput {
    #[serde(flatten)]
    pub notes: InputNotes,
    pub context_parallel_size: u32,
    /// Tokens of one sequence per CP rank.
    pub local_seq_length: u64,
    pub rule_of_thumb_cp: u32,
    /// The layout that backs the choice.
    pub config: TrainingConfig,
    pub predicted: Prediction,
    pub alternatives: Vec<CpAlternative>,
    pub rationale: String,
    pub citations: Vec<Citation>,
}

pub fn size_cp(catalog: &Catalog, input: SizeCpInput) -> Result<SizeCpOutput, ToolError> {
    use crate::model::limits::{GLOBAL_BATCH_SIZE, NUM_GPUS, SEQ_LENGTH, TENSOR_PARALLEL};
    NUM_GPUS.check("", Some(u64::from(input.num_gpus)))?;
    SEQ_LENGTH.check("", Some(input.seq_length))?;
    TENSOR_PARALLEL.check("", input.tensor_model_parallel_size.map(u64::from))?;
    GLOBAL_BATCH_SIZE.check("", input.global_batch_size.map(u64::from))?;
    let cards = catalog.cost();
    let hardware = input.hardware.clone().unwrap_or_else(|| "h100".into());
    let probe = TrainingConfig {
        model: Some(input.model.clone()),
        hardware: Some(hardware.clone()),
        num_gpus: Some(input.num_gpus),
        seq_length: Some(input.seq_length),
        tensor_model_parallel_size: input.tensor_model_parallel_size,
        ..TrainingConfig::default()
    };
    let resolved = resolve(cards, &probe)?;
    let hw = resolved.hardware;
    let tp_fixed = input
        .tensor_model_parallel_size
        .or((hw.nvlink_domain_size <= 8).then_some(1));
    let tp_min = u64::from(tp_fixed.unwrap_or(1));
    if u64::from(input.num_gpus) % tp_min != 0 {
        return Err(ToolError::field(
            "num_gpus",
            format!("{} is not divisible by TP {}", input.num_gpus, tp_min),
            "use a multiple of the tensor-parallel size",
        ));
    }
    let rule_cp = next_power_of_two(input.seq_length.div_ceil(RULE_OF_THUMB_TOKENS_PER_CP_RANK))
        .min(u64::from(input.num_gpus) / tp_min)
        .max(1) as u32;
    let base = search_base(
        &input.model,
        &hardware,
        input.num_gpus,
        input.seq_length,
        input.precision,
        None,
    );

    let mut alternatives: Vec<CpAlternative> = Vec::new();
    let mut best: Option<(u32, TrainingConfig, crate::model::Estimate)> = None;
    // Every power-of-two CP with CP·TP within the GPUs; computed in u64 so that no GPU count
    // can wrap the doubling (the limits keep CP far below 2^32).
    let cps = std::iter::successors(Some(1u64), |cp| cp.checked_mul(2))
        .take_while(|cp| cp.saturating_mul(tp_min) <= u64::from(input.num_gpus))
        .filter_map(|cp| u32::try_from(cp).ok());
    for cp in cps {
        let local = input.seq_length / u64::from(cp);
        let divisor = 2u64.saturating_mul(u64::from(cp)).saturating_mul(tp_min);
        if !input.seq_length.is_multiple_of(divisor) {
            alternatives.push(CpAlternative {
                context_parallel_size: cp,
                local_seq_length: local,
                layout: None,
                recompute: None,
                predicted: None,
                note: format!("seq_length is not divisible by 2·CP·TP = {divisor}"),
            });
            continue;
        }
        let outcome = search(&SearchRequest {
            resolved: &resolved,
            base: base.clone(),
            constraints: LayoutConstraints {
                tensor_model_parallel_size: tp_fixed,
                context_parallel_size: Some(cp),
                ..LayoutConstraints::default()
            },
            global_batch_size: input.global_batch_size,
            describe_best: 1,
        });
        let alternative = match (outcome.ranked.first(), &outcome.closest_miss) {
            (Some((cfg, est)), _) => {
                let note = format!(
                    "fits; best layout {} ({:.0} TFLOP/s/GPU)",
                    layout_label(est),
                    est.performance.model_tflops_per_gpu
                );
                let better = best.as_ref().is_none_or(|(_, _, b)| {
                    est.performance.tokens_per_second_per_gpu
                        > b.performance.tokens_per_second_per_gpu
                });
                if better {
                    best = Some((cp, cfg.clone(), est.clone()));
                }
                CpAlternative {
                    context_parallel_size: cp,
                    local_seq_length: local,
                    layout: Some(layout_label(est)),
                    recompute: Some(recompute_label(cfg)),
                    predicted: Some(Prediction::of(est)),
                    note,
                }
            }
            (None, Some((cfg, est))) => CpAlternative {
                context_parallel_size: cp,
                local_seq_length: local,
                layout: Some(layout_label(est)),
                recompute: Some(recompute_label(cfg)),
                predicted: Some(Prediction::of(est)),
                note: format!(
                    "does not fit: the leanest layout needs {:.1} GiB of {:.1}",
                    est.memory.peak_gib, est.memory.capacity_gib
                ),
            },
            (None, None) => CpAlternative {
                context_parallel_size: cp,
                local_seq_length: local,
                layout: None,
                recompute: None,
                predicted: None,
                note: "no layout passes the divisibility rules".into(),
            },
        };
        alternatives.push(alternative);
    }

    let Some((best_cp, _, best_est)) = best else {
        return Err(ToolError::Infeasible(format!(
            "No CP makes {} at {} tokens fit on {} × {}: add GPUs, use a GPU with more memory, or shorten seq_length. Closest attempts: {}",
            resolved.arch.display_name,
            input.seq_length,
            input.num_gpus,
            hw.display_name,
            alternatives
                .iter()
                .filter_map(|a| a.predicted.as_ref().map(|p| format!("CP{} {:.0} GiB", a.context_parallel_size, p.peak_gib)))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    // Ties go to the candidate nearest the rule of thumb.
    let best_speed = best_est.performance.tokens_per_second_per_gpu;
    let distance = |cp: u32| (f64::from(cp).log2() - f64::from(rule_cp).log2()).abs();
    let chosen_cp = alternatives
        .iter()
        .filter(|a| a.note.starts_with("fits"))
        .filter_map(|a| a.predicted.as_ref().map(|p| (a.context_parallel_size, p)))
        .filter(|(_, p)| p.tokens_per_second_per_gpu >= best_speed * (1.0 - TIE_FRACTION))
        .min_by(|a, b| distance(a.0).total_cmp(&distance(b.0)))
        .map_or(best_cp, |(cp, _)| cp);
    let chosen = search(&SearchRequest {
        resolved: &resolved,
        base: base.clone(),
        constraints: LayoutConstraints {
            tensor_model_parallel_size: tp_fixed,
            context_parallel_size: Some(chosen_cp),
            ..LayoutConstraints::default()
        },
        global_batch_size: input.global_batch_size,
        describe_best: 1,
    });
    let Some((config, estimate)) = chosen.ranked.into_iter().next() else {
        return Err(ToolError::Infeasible(
            "the chosen CP stopped fitting on re-evaluation".into(),
        ));
    };
    let predicted = Prediction::of(&estimate);
    let local_seq_length = input.seq_length / u64::from(chosen_cp);
    let rationale = cp_rationale(
        &input,
        rule_cp,
        chosen_cp,
        best_cp,
        &estimate,
        &config,
        &alternatives,
        documented_cp(catalog, &resolved.arch.id, &hardware, input.seq_length),
    );
    let mut notes = search_notes(
        catalog.cost(),
        &config,
        input.hardware.is_none().then_some(hw),
    );
    notes.note_calibration(catalog.cost(), config.hardware.as_deref());
    let rationale = rationale + &notes.markdown();
    Ok(SizeCpOutput {
        notes,
        context_parallel_size: chosen_cp,
        local_seq_length,
        rule_of_thumb_cp: rule_cp,
        config,
        predicted,
        alternatives,
        rationale,
        citations: citations(
            catalog,
            &[
                ("moe-long-context", "cp sizing"),
                ("moe-long-context", "local sequence"),
                ("moe-long-context", "kv heads"),
                ("moe-long-context", "trading tp"),
                ("long-context-moe-rl", "default recipe"),
            ],
        ),
    })
}

/// What the documented recipes use for the same model, hardware and sequence length.
fn documented_cp(
    catalog: &Catalog,
    model: &str,
    hardware: &str,
    seq_length: u64,
) -> Option<String> {
    let recipes: Vec<String> = catalog
        .cost()
        .recipes
        .iter()
        .filter(|r| {
            matches!(&r.config.model, Some(ModelSpec::Id(id)) if id == model)
                && r.config.hardware.as_deref() == Some(hardware)
                && r.config.seq_length == Some(seq_length)
        })
        .map(|r| {
            format!(
                "`{}` uses CP{} on {} GPUs",
                r.id,
                r.config.cp(),
                r.config.num_gpus.unwrap_or(0)
            )
        })
        .collect();
    (!recipes.is_empty()).then(|| format!("Documented: {}.", recipes.join("; ")))
}

#[allow(clippy::too_many_arguments)]
fn cp_rationale(
    input: &SizeCpInput,
    rule_cp: u32,
    chosen_cp: u32,
    fastest_cp: u32,
    estimate: &crate::model::Estimate,
    config: &TrainingConfig,
    alternatives: &[CpAlternative],
    documented: Option<String>,
) -> String {
    let mut text = format!(
        "Rule of thumb: CP ≈ seq/4096 = {}/4096 → **{}** (power of two, capped by the GPUs). ",
        input.seq_length, rule_cp
    );
    text.push_str(&format!(
        "The cost model then searched the other dimensions for every CP: **CP{}** gives {} tokens per CP rank with {}, recompute {}, predicted {:.0} TFLOP/s/GPU{} and {:.1} of {:.1} GiB.",
        chosen_cp,
        input.seq_length / u64::from(chosen_cp),
        layout_label(estimate),
        recompute_label(config),
        estimate.performance.model_tflops_per_gpu,
        estimate.performance.band_text(),
        estimate.memory.peak_gib,
        estimate.memory.capacity_gib,
    ));
    let levers = levers_label(config, estimate);
    text.push_str(&format!(
        " It runs in {}{}.",
        crate::model::config::user_name(&config.precision()),
        if levers.is_empty() {
            String::new()
        } else {
            format!(" with {levers}")
        }
    ));
    let capacity = estimate.memory.capacity_gib.max(f64::MIN_POSITIVE);
    if estimate.memory.headroom_gib < capacity * super::feasibility::MEMORY_WALL_HEADROOM {
        text.push_str(&format!(
            " **Tight:** only {:.2} GiB to spare, less than {:.0}% of the GPU; fragmentation varies from run to run, so a larger CP or more recompute is the safer pick.",
            estimate.memory.headroom_gib,
            super::feasibility::MEMORY_WALL_HEADROOM * 100.0
        ));
    }
    if fastest_cp != chosen_cp {
        text.push_str(&format!(
            " CP{fastest_cp} is within {:.0}% of it, a tie inside the model's error band, so the CP nearest the rule of thumb is kept.",
            TIE_FRACTION * 100.0
        ));
    }
    let smaller_misses: Vec<String> = alternatives
        .iter()
        .filter(|a| a.context_parallel_size < chosen_cp && a.note.starts_with("does not fit"))
        .map(|a| {
            format!(
                "CP{} ({:.0} GiB)",
                a.context_parallel_size,
                a.predicted.as_ref().map_or(0.0, |p| p.peak_gib)
            )
        })
        .collect();
    let fitting: Vec<String> = alternatives
        .iter()
        .filter(|a| a.note.starts_with("fits"))
        .filter_map(|a| {
            a.predicted.as_ref().map(|p| {
                format!(
                    "CP{} {:.0} TFLOP/s/GPU",
                    a.context_parallel_size, p.model_tflops_per_gpu
                )
            })
        })
        .collect();
    if fitting.len() > 1 {
        text.push_str(&format!("\n\nEvery CP that fits: {}.", fitting.join(", ")));
    }
    if !smaller_misses.is_empty() {
        text.push_str(&format!(
            "\n\nSmaller CP does not fit: {}. ",
            smaller_misses.join(", ")
        ));
    }
    text.push_str(&format!(
        "\n\nWith CP{chosen_cp}, DP is {} and EDP {}: larger CP shrinks DP (and the global batch) and shortens the local sequence, which raises host overhead per token.",
        estimate.layout.dp, estimate.layout.edp
    ));
    if let Some(documented) = documented {
        text.push_str(&format!("\n\n{documented}"));
    }
    text
}
