//! `plan_layouts`: search the layout space with the cost model and rank what fits.
//!
//! The space is the product of the structural dimensions (TP, CP, PP, VPP, EP, ETP, MBS,
//! dispatcher) and the memory levers (recompute preset, optimizer offload, optimizer
//! sharding). Structural combinations that break a divisibility rule are counted and dropped
//! before any arithmetic. For each remaining structure the memory levers are tried from the
//! cheapest up; a lever set that only adds savings on top of one that already fits is
//! dominated (it cannot be faster) and is skipped. The search uses every core.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{
    citations, layout_label, layout_violations, levers_label, recompute_label, resolve, round,
    Citation, InputNotes, Prediction, Resolved, ToolError,
};
use crate::catalog::Catalog;
use crate::model::config::{
    CpCommType, FlexBackend, FsdpStrategy, RecomputeGranularity, RecomputeMethod, RecomputeModule,
    TokenDispatcher,
};
use crate::model::{
    evaluate, evaluate_memory_first, evaluate_memory_only, Architecture, Estimate, Hardware,
    ModelSpec, Precision, TrainingConfig, ValidArchitecture,
};

/// Tokens per optimizer step used to pick a global batch size when none is given (about the
/// 4M tokens of the published 4K recipes); the batch is rounded up to a multiple of DP·MBS.
pub const DEFAULT_TOKENS_PER_STEP: u64 = 4 * 1024 * 1024;

/// Relative throughput difference below which two layouts count as equally fast.
const THROUGHPUT_TIE: f64 = 0.005;

/// Limits on the search.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct LayoutConstraints {
    /// Fix TP.
    #[serde(default, alias = "tp")]
    pub tensor_model_parallel_size: Option<u32>,
    /// Fix CP.
    #[serde(default, alias = "cp")]
    pub context_parallel_size: Option<u32>,
    /// Fix PP.
    #[serde(default, alias = "pp")]
    pub pipeline_model_parallel_size: Option<u32>,
    /// Fix EP.
    #[serde(default, alias = "ep")]
    pub expert_model_parallel_size: Option<u32>,
    /// Fix the micro-batch size.
    #[serde(default, alias = "mbs")]
    pub micro_batch_size: Option<u32>,
    #[serde(default)]
    pub max_tp: Option<u32>,
    #[serde(default)]
    pub max_pp: Option<u32>,
    #[serde(default)]
    pub max_cp: Option<u32>,
    #[serde(default)]
    pub max_ep: Option<u32>,
    /// Keep at least this much memory free per GPU, GiB (default 0).
    #[serde(default)]
    pub min_headroom_gib: Option<f64>,
    /// Allow full recompute (default true).
    #[serde(default)]
    pub allow_full_recompute: Option<bool>,
    /// Allow optimizer CPU offload (default true).
    #[serde(default)]
    pub allow_optimizer_offload: Option<bool>,
    /// Allow Megatron-FSDP parameter+gradient+optimizer sharding (default true).
    #[serde(default)]
    pub allow_fsdp: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::model::limits::schema_limits)]
pub struct PlanLayoutsInput {
    /// Model card id (see `list_models`) or a HuggingFace config.json object.
    pub model: ModelSpec,
    /// Hardware card id (see `list_hardware`).
    pub hardware: String,
    pub num_gpus: u32,
    pub seq_length: u64,
    /// Global batch size in sequences; when absent each layout gets about 4M tokens per step.
    #[serde(default)]
    pub global_batch_size: Option<u32>,
    /// GEMM precision; default BF16, as in every tool (FP8 and FP4 only when asked).
    #[serde(default)]
    pub precision: Option<Precision>,
    #[serde(default)]
    pub constraints: LayoutConstraints,
    /// Settings applied to every candidate (e.g. `{"linear_cross_entropy": true}`).
    #[serde(default)]
    pub base: Option<TrainingConfig>,
    /// How many candidates to return (default 5, at most 50).
    #[serde(default)]
    pub top_k: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Candidate {
    pub rank: u32,
    /// "TP1 CP32 EP32 PP8 VPP4 DP1 EDP1 MBS1 GBS16"
    pub layout: String,
    pub recompute: String,
    /// Dispatcher, optimizer offload and sharding.
    pub levers: String,
    pub config: TrainingConfig,
    pub predicted: Prediction,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanLayoutsOutput {
    #[serde(flatten)]
    pub notes: InputNotes,
    /// Best first, by predicted tokens/s per GPU among layouts that fit.
    pub candidates: Vec<Candidate>,
    /// Every combination of the search space.
    pub considered: u64,
    /// Combinations the cost model evaluated.
    pub evaluated: u64,
    /// Evaluated layouts that fit.
    pub feasible: u64,
    /// Combinations skipped because a cheaper lever set already fit the same structure.
    pub dominated: u64,
    /// Rejections by reason (divisibility rules before evaluation; violations and
    /// out-of-memory after).
    pub rejected: BTreeMap<String, u64>,
    pub rationale: String,
    pub citations: Vec<Citation>,
}

/// One memory-lever setting; the level fields order them by time cost.
#[derive(Debug, Clone, PartialEq)]
pub struct LeverSet {
    pub recompute_level: usize,
    pub offload: bool,
    pub fsdp: bool,
}

/// The recompute presets of the search, cheapest first.
pub fn recompute_presets(arch: &Architecture, allow_full: bool) -> Vec<TrainingConfig> {
    let mut presets = vec![TrainingConfig::default()];
    let selective = |modules: Vec<RecomputeModule>| TrainingConfig {
        recompute_granularity: Some(RecomputeGranularity::Selective),
        recompute_modules: Some(modules),
        ..TrainingConfig::default()
    };
    let has_moe = arch.moe.is_some();
    let mut light = vec![RecomputeModule::Layernorm];
    if has_moe {
        light.push(RecomputeModule::MoeAct);
    }
    presets.push(selective(light));
    let mut standard = Vec::new();
    if arch.mla.is_some() {
        standard.push(RecomputeModule::MlaUpProj);
    }
    standard.push(RecomputeModule::Layernorm);
    if has_moe {
        standard.push(RecomputeModule::Moe);
    }
    if arch.has_dense_mlp_layers() {
        standard.push(RecomputeModule::Mlp);
    }
    presets.push(selective(standard));
    if allow_full {
        presets.push(TrainingConfig {
            recompute_granularity: Some(RecomputeGranularity::Full),
            recompute_method: Some(RecomputeMethod::Uniform),
            recompute_num_layers: Some(1),
            ..TrainingConfig::default()
        });
    }
    presets
}

fn powers_of_two_up_to(max: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut v = 1u64;
    while v <= max {
        out.push(v);
        match v.checked_mul(2) {
            Some(next) => v = next,
            None => break,
        }
    }
    out
}

fn fixed_or(fixed: Option<u32>, options: Vec<u64>, max: Option<u32>) -> Vec<u64> {
    match fixed {
        Some(v) => vec![u64::from(v)],
        None => options
            .into_iter()
            .filter(|v| max.is_none_or(|m| *v <= u64::from(m)))
            .collect(),
    }
}

/// One structural layout to evaluate under every lever set.
#[derive(Debug, Clone)]
struct Structure {
    tp: u32,
    cp: u32,
    pp: u32,
    vpp: u32,
    ep: u32,
    mbs: u32,
    dispatcher: Option<(TokenDispatcher, Option<FlexBackend>)>,
}

/// The search, shared by `plan_layouts`, `size_cp` and `lookup_recipe`.
pub struct SearchRequest<'a> {
    pub resolved: &'a Resolved<'a>,
    /// Model, hardware, GPUs, sequence, precision and fixed settings for every candidate.
    pub base: TrainingConfig,
    pub constraints: LayoutConstraints,
    pub global_batch_size: Option<u32>,
    /// How many of the best candidates the caller reports: they are evaluated again in full
    /// (warnings, the worst rank's reason) and returned; the others are only counted.
    pub describe_best: usize,
}

pub struct SearchOutcome {
    /// The best `describe_best` fitting candidates, best first.
    pub ranked: Vec<(TrainingConfig, Estimate)>,
    /// Fitting candidates in all.
    pub feasible: u64,
    /// The lowest-memory candidate evaluated, when nothing fits.
    pub closest_miss: Option<(TrainingConfig, Estimate)>,
    pub considered: u64,
    pub evaluated: u64,
    pub dominated: u64,
    pub rejected: BTreeMap<String, u64>,
}

pub fn search(request: &SearchRequest<'_>) -> SearchOutcome {
    let arch: &Architecture = &request.resolved.arch;
    let hw = request.resolved.hardware;
    let c = &request.constraints;
    let num_gpus = u64::from(request.base.num_gpus.unwrap_or(1));
    let seq = request.base.seq_length.unwrap_or(4096);
    let layers = u64::from(arch.num_layers);
    let experts = arch.moe.as_ref().map_or(1, |m| m.num_experts);

    let tps = fixed_or(
        c.tensor_model_parallel_size,
        powers_of_two_up_to(u64::from(hw.nvlink_domain_size.min(8))),
        c.max_tp,
    );
    let cps = fixed_or(
        c.context_parallel_size,
        powers_of_two_up_to(num_gpus),
        c.max_cp,
    );
    let pps = fixed_or(
        c.pipeline_model_parallel_size,
        powers_of_two_up_to(layers.min(32)),
        c.max_pp,
    );
    let eps = if arch.moe.is_some() {
        fixed_or(
            c.expert_model_parallel_size,
            powers_of_two_up_to(experts.min(num_gpus)),
            c.max_ep,
        )
    } else {
        vec![1]
    };
    let mbss = fixed_or(
        c.micro_batch_size,
        if seq >= 16_384 {
            vec![1]
        } else {
            vec![1, 2, 4]
        },
        None,
    );
    let dispatchers: Vec<Option<(TokenDispatcher, Option<FlexBackend>)>> =
        if arch.moe.is_none() || request.base.moe_token_dispatcher_type.is_some() {
            vec![None]
        } else {
            vec![None, Some((TokenDispatcher::Alltoall, None))]
        };
    let presets = recompute_presets(arch, c.allow_full_recompute.unwrap_or(true));
    let offloads: Vec<bool> = if c.allow_optimizer_offload.unwrap_or(true)
        && request.base.optimizer_cpu_offload.is_none()
    {
        vec![false, true]
    } else {
        vec![request.base.optimizer_cpu_offload.unwrap_or(false)]
    };
    let fsdps: Vec<bool> =
        if c.allow_fsdp.unwrap_or(true) && request.base.data_parallel_sharding_strategy.is_none() {
            vec![false, true]
        } else {
            vec![false]
        };
    let mut levers: Vec<LeverSet> = Vec::new();
    for recompute_level in 0..presets.len() {
        for &offload in &offloads {
            for &fsdp in &fsdps {
                levers.push(LeverSet {
                    recompute_level,
                    offload,
                    fsdp,
                });
            }
        }
    }
    levers.sort_by_key(|l| l.recompute_level + usize::from(l.offload) + usize::from(l.fsdp));

    let mut rejected: BTreeMap<String, u64> = BTreeMap::new();
    let mut structures: Vec<Structure> = Vec::new();
    let per_structure = levers.len() as u64;
    let mut considered = 0u64;
    for &tp in &tps {
        for &cp in &cps {
            for &pp in &pps {
                let vpps: Vec<u64> = if pp == 1 { vec![1] } else { vec![1, 2, 4] };
                for &vpp in &vpps {
                    for &ep in &eps {
                        for &mbs in &mbss {
                            for dispatcher in &dispatchers {
                                considered += per_structure;
                                let reason = structural_problem(
                                    arch, num_gpus, seq, layers, tp, cp, pp, vpp, ep,
                                );
                                if let Some(reason) = reason {
                                    *rejected.entry(reason.into()).or_default() += per_structure;
                                    continue;
                                }
                                structures.push(Structure {
                                    tp: tp as u32,
                                    cp: cp as u32,
                                    pp: pp as u32,
                                    vpp: vpp as u32,
                                    ep: ep as u32,
                                    mbs: mbs as u32,
                                    dispatcher: *dispatcher,
                                });
                            }
                        }
                    }
                }
            }
        }
    }

    let mut outcome = SearchOutcome {
        ranked: Vec::new(),
        feasible: 0,
        closest_miss: None,
        considered,
        evaluated: 0,
        dominated: 0,
        rejected,
    };
    // Checked once here; every candidate would fail the same check.
    let valid_arch = match ValidArchitecture::check(arch) {
        Ok(valid) => valid,
        Err(_) => {
            outcome.rejected.insert(
                "invalid_architecture".into(),
                structures.len() as u64 * per_structure,
            );
            return outcome;
        }
    };
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 16);
    // Workers claim structures a few at a time from a shared counter: structures cost very
    // different amounts (those where something fits are priced), so fixed shares would leave
    // a worker idle. Results do not depend on which worker took what (ties are broken by
    // the candidates' places in the search order).
    let next = AtomicUsize::new(0);
    let partials: Vec<Partial> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.min(structures.len()))
            .map(|_| {
                scope.spawn(|| {
                    evaluate_structures(request, valid_arch, &structures, &next, &presets, &levers)
                })
            })
            .collect();
        // A worker that panicked is a bug: re-raise it so that the tool's panic guard answers
        // with an error, instead of reporting a search with its share silently missing.
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });

    let mut fitting: Vec<Fitting> = Vec::new();
    let mut closest_miss: Option<Miss> = None;
    for partial in partials {
        outcome.evaluated += partial.evaluated;
        outcome.dominated += partial.dominated;
        for (reason, count) in partial.rejected {
            *outcome.rejected.entry(reason).or_default() += count;
        }
        fitting.extend(partial.fitting);
        if let Some(miss) = partial.closest_miss {
            keep_lowest_memory(&mut closest_miss, miss);
        }
    }
    outcome.feasible = fitting.len() as u64;
    let r = request.resolved;
    outcome.closest_miss = closest_miss.map(|miss| {
        let estimate = evaluate(&r.arch, r.hardware, r.constants, &miss.cfg);
        (miss.cfg, estimate)
    });
    // Throughput decides; layouts within half a percent of each other (well inside the
    // model's error) are ordered by memory headroom instead.
    let speed_bucket =
        |tokens_per_s: f64| (tokens_per_s.max(1e-9).ln() / THROUGHPUT_TIE.ln_1p()).floor();
    let mut keys: Vec<(f64, f64, SearchOrder, usize)> = fitting
        .iter()
        .enumerate()
        .map(|(i, f)| (speed_bucket(f.tokens_per_s), f.headroom_gib, f.order, i))
        .collect();
    keys.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(b.1.total_cmp(&a.1))
            .then(a.2.cmp(&b.2))
    });
    // Only the reported candidates are described: evaluated again in full.
    outcome.ranked = keys
        .iter()
        .take(request.describe_best)
        .filter_map(|&(_, _, _, i)| fitting.get(i))
        .map(|f| {
            let estimate = evaluate(&r.arch, r.hardware, r.constants, &f.cfg);
            (f.cfg.clone(), estimate)
        })
        .collect();
    outcome
}

/// A candidate that fits, with the numbers it is ranked by (its estimate is not kept: the
/// search describes only the best, evaluated again in full).
struct Fitting {
    order: SearchOrder,
    cfg: TrainingConfig,
    tokens_per_s: f64,
    headroom_gib: f64,
}

#[allow(clippy::too_many_arguments)]
fn structural_problem(
    arch: &Architecture,
    num_gpus: u64,
    seq: u64,
    layers: u64,
    tp: u64,
    cp: u64,
    pp: u64,
    vpp: u64,
    ep: u64,
) -> Option<&'static str> {
    // Saturating: a product beyond u64 cannot divide any GPU count.
    if !num_gpus.is_multiple_of(tp.saturating_mul(cp).saturating_mul(pp)) {
        return Some("world_size_not_divisible_by_tp_cp_pp");
    }
    if !num_gpus.is_multiple_of(ep.saturating_mul(pp)) {
        return Some("world_size_not_divisible_by_ep_pp");
    }
    if !arch.num_attention_heads.is_multiple_of(tp)
        || (!arch.kv_heads().is_multiple_of(tp) && !tp.is_multiple_of(arch.kv_heads()))
    {
        return Some("heads_not_divisible_by_tp");
    }
    if !seq.is_multiple_of(2u64.saturating_mul(cp).saturating_mul(tp)) {
        return Some("sequence_not_divisible_by_2_cp_tp");
    }
    if pp.saturating_mul(vpp) > layers {
        return Some("more_pipeline_stages_than_layers");
    }
    if vpp > 1 && layers < pp.saturating_mul(vpp).saturating_mul(2) {
        return Some("virtual_stages_too_small");
    }
    None
}

/// A candidate's place in the search: its structure's, then its lever set's (cheapest first).
type SearchOrder = (usize, usize);

/// A candidate that does not fit, kept while it is the lowest-memory one.
struct Miss {
    order: SearchOrder,
    cfg: TrainingConfig,
    estimate: Estimate,
}

struct Partial {
    fitting: Vec<Fitting>,
    closest_miss: Option<Miss>,
    evaluated: u64,
    dominated: u64,
    rejected: BTreeMap<String, u64>,
}

impl Partial {
    /// Keeps the candidate as the closest miss when it needs less memory than the one held.
    fn offer_closest_miss(&mut self, order: SearchOrder, cfg: TrainingConfig, estimate: Estimate) {
        keep_lowest_memory(
            &mut self.closest_miss,
            Miss {
                order,
                cfg,
                estimate,
            },
        );
    }
}

/// Puts `candidate` in `slot` when the slot is empty or holds a higher memory peak (at an
/// equal peak, the one earlier in the search order).
fn keep_lowest_memory(slot: &mut Option<Miss>, candidate: Miss) {
    let lower = slot.as_ref().is_none_or(|held| {
        candidate
            .estimate
            .memory
            .peak_gib
            .total_cmp(&held.estimate.memory.peak_gib)
            .then(candidate.order.cmp(&held.order))
            .is_lt()
    });
    if lower {
        *slot = Some(candidate);
    }
}

/// What a lever set of the structure at hand is known to give, evaluated or implied.
enum Known {
    /// Evaluated without pricing the step (the memory verdict and violations only).
    Evaluated(Box<(TrainingConfig, Estimate)>),
    /// Out of memory because a lever set that needs no more memory is: never evaluated.
    ImpliedOutOfMemory,
}

/// Whether lever set `weaker` needs at least the memory of `stronger` on the same structure:
/// the same sharding, no more offload, and a recompute preset earlier on the selective chain
/// (`chain_top`: the last preset of `recompute_presets` that recomputes modules selectively;
/// each recomputes at least what the one before it does, and full recompute keeps other
/// tensors, so it is compared with itself only). `tests/model_properties.rs`
/// (`search_levers_order_memory`) holds the model to this order.
fn needs_at_least(weaker: &LeverSet, stronger: &LeverSet, chain_top: Option<usize>) -> bool {
    let on_chain = |level: usize| chain_top.is_some_and(|top| level <= top);
    let recompute_weaker = weaker.recompute_level == stronger.recompute_level
        || (on_chain(stronger.recompute_level)
            && weaker.recompute_level < stronger.recompute_level);
    weaker.fsdp == stronger.fsdp && (!weaker.offload || stronger.offload) && recompute_weaker
}

/// Whether an estimate failed on memory alone (no layout rule refused it).
fn out_of_memory_only(estimate: &Estimate) -> bool {
    !estimate.fits && layout_violations(estimate).next().is_none()
}

/// Evaluates the structures this worker claims from `next` (a few at a time) under every
/// lever set.
fn evaluate_structures(
    request: &SearchRequest<'_>,
    arch: ValidArchitecture<'_>,
    structures: &[Structure],
    next: &AtomicUsize,
    presets: &[TrainingConfig],
    levers: &[LeverSet],
) -> Partial {
    let r = request.resolved;
    let min_headroom = request.constraints.min_headroom_gib.unwrap_or(0.0);
    let chain_top = presets
        .iter()
        .rposition(|p| p.recompute_granularity != Some(RecomputeGranularity::Full));
    let mut partial = Partial {
        fitting: Vec::new(),
        closest_miss: None,
        evaluated: 0,
        dominated: 0,
        rejected: BTreeMap::new(),
    };
    const CLAIM: usize = 8;
    let claimed = std::iter::from_fn(|| {
        let start = next.fetch_add(CLAIM, AtomicOrdering::Relaxed);
        (start < structures.len()).then(|| start..(start + CLAIM).min(structures.len()))
    })
    .flatten();
    for structure_index in claimed {
        let s = &structures[structure_index];
        let mut known: Vec<Option<Known>> = levers.iter().map(|_| None).collect();
        // Evaluates lever set `index` for its memory (once), and marks every lever set that
        // needs at least as much memory as an out-of-memory one as out of memory too. A
        // candidate the structure cannot build is refused with its reason (`Err`).
        let probe = |index: usize,
                     known: &mut Vec<Option<Known>>,
                     partial: &mut Partial|
         -> Result<bool, &'static str> {
            if let Some(k) = &known[index] {
                return Ok(match k {
                    Known::Evaluated(pair) => out_of_memory_only(&pair.1),
                    Known::ImpliedOutOfMemory => true,
                });
            }
            let lever = &levers[index];
            let cfg = candidate_config(request, s, &presets[lever.recompute_level], lever)?;
            let estimate = evaluate_memory_only(arch, r.hardware, r.constants, &cfg);
            partial.evaluated += 1;
            let oom = out_of_memory_only(&estimate);
            known[index] = Some(Known::Evaluated(Box::new((cfg, estimate))));
            if oom {
                for (other, slot) in known.iter_mut().enumerate() {
                    if slot.is_none() && needs_at_least(&levers[other], lever, chain_top) {
                        *slot = Some(Known::ImpliedOutOfMemory);
                    }
                }
            }
            Ok(oom)
        };
        // The lowest-memory lever sets first: the two strongest recompute presets (selective
        // and full keep different tensors, so neither bounds the other), with offload when it
        // is searched (offload only removes state), with and without sharding (FSDP's gathered
        // units can outweigh what it shards). When none of them fits, no lever set of this
        // structure does: they are all counted as out of memory without being evaluated, and
        // the lowest of these estimates competes for the closest miss.
        if levers.len() > 2 {
            let strongest = levers.iter().map(|l| l.recompute_level).max().unwrap_or(0);
            let offload = levers.iter().any(|l| l.offload);
            let frontier: Vec<usize> = (0..levers.len())
                .filter(|&i| {
                    levers[i].recompute_level + 1 >= strongest && levers[i].offload == offload
                })
                .collect();
            let mut all_out_of_memory = true;
            for &index in &frontier {
                if probe(index, &mut known, &mut partial) != Ok(true) {
                    all_out_of_memory = false;
                    break;
                }
            }
            if all_out_of_memory {
                *partial.rejected.entry("out_of_memory".into()).or_default() += levers.len() as u64;
                for &i in &frontier {
                    if let Some(Known::Evaluated(pair)) = known[i].take() {
                        let (cfg, estimate) = *pair;
                        partial.offer_closest_miss((structure_index, i), cfg, estimate);
                    }
                }
                continue;
            }
        }
        let mut fitted: Vec<&LeverSet> = Vec::new();
        for (index, lever) in levers.iter().enumerate() {
            let dominated = fitted.iter().any(|f| {
                f.recompute_level <= lever.recompute_level
                    && (!f.offload || lever.offload)
                    && (!f.fsdp || lever.fsdp)
            });
            if dominated {
                partial.dominated += 1;
                continue;
            }
            // Before a weak preset, the stronger presets of its chain, strongest first: the
            // weak one fits only if they do, and most weak presets do not.
            if let Some(top) = chain_top.filter(|top| lever.recompute_level < *top) {
                for level in (lever.recompute_level + 1..=top).rev() {
                    let stronger = levers.iter().position(|l| {
                        l.recompute_level == level
                            && l.offload == lever.offload
                            && l.fsdp == lever.fsdp
                    });
                    let Some(stronger) = stronger else { continue };
                    if probe(stronger, &mut known, &mut partial) != Ok(false) {
                        break;
                    }
                }
            }
            if let Err(reason) = probe(index, &mut known, &mut partial) {
                *partial.rejected.entry(reason.into()).or_default() += 1;
                continue;
            }
            let (cfg, estimate) = match known[index].take() {
                Some(Known::Evaluated(pair)) => *pair,
                // Needs at least the memory of a lever set that does not fit, so it cannot be
                // the closest miss either.
                _ => {
                    known[index] = Some(Known::ImpliedOutOfMemory);
                    *partial.rejected.entry("out_of_memory".into()).or_default() += 1;
                    continue;
                }
            };
            if let Some(v) = layout_violations(&estimate).next() {
                *partial.rejected.entry(v.code.clone()).or_default() += 1;
                continue;
            }
            if !estimate.fits || estimate.memory.headroom_gib < min_headroom {
                let reason = if estimate.fits {
                    "below_min_headroom"
                } else {
                    "out_of_memory"
                };
                *partial.rejected.entry(reason.into()).or_default() += 1;
                partial.offer_closest_miss((structure_index, index), cfg, estimate);
                continue;
            }
            // Kept: now priced (the probes never are).
            let estimate = evaluate_memory_first(arch, r.hardware, r.constants, &cfg);
            fitted.push(lever);
            partial.fitting.push(Fitting {
                order: (structure_index, index),
                cfg,
                tokens_per_s: estimate.performance.tokens_per_second_per_gpu,
                headroom_gib: estimate.memory.headroom_gib,
            });
        }
    }
    partial
}

fn candidate_config(
    request: &SearchRequest<'_>,
    s: &Structure,
    preset: &TrainingConfig,
    lever: &LeverSet,
) -> Result<TrainingConfig, &'static str> {
    // Sizes are bounded by `crate::model::limits`, but a product that leaves u32 must be a
    // rejected candidate, never a wrapped or zero divisor.
    const TOO_LARGE: &str = "batch_sizes_too_large";
    let num_gpus = request.base.num_gpus.unwrap_or(1);
    let seq = request.base.seq_length.unwrap_or(4096);
    let model_parallel =
        s.tp.checked_mul(s.cp)
            .and_then(|v| v.checked_mul(s.pp))
            .filter(|v| *v > 0)
            .ok_or(TOO_LARGE)?;
    let dp = (num_gpus / model_parallel).max(1);
    let step = dp.checked_mul(s.mbs).filter(|v| *v > 0).ok_or(TOO_LARGE)?;
    let gbs = match request.global_batch_size {
        Some(gbs) => {
            if gbs % step != 0 {
                return Err("global_batch_not_divisible");
            }
            gbs
        }
        None => {
            let sequences = u32::try_from((DEFAULT_TOKENS_PER_STEP / seq.max(1)).max(1))
                .map_err(|_| TOO_LARGE)?;
            sequences
                .div_ceil(step)
                .checked_mul(step)
                .ok_or(TOO_LARGE)?
        }
    };
    let mut cfg = request.base.clone();
    cfg.tensor_model_parallel_size = Some(s.tp);
    cfg.context_parallel_size = Some(s.cp);
    cfg.pipeline_model_parallel_size = Some(s.pp);
    cfg.virtual_pipeline_model_parallel_size = (s.vpp > 1).then_some(s.vpp);
    cfg.expert_model_parallel_size = Some(s.ep);
    cfg.expert_tensor_parallel_size = Some(1);
    cfg.micro_batch_size = Some(s.mbs);
    cfg.global_batch_size = Some(gbs);
    cfg.sequence_parallel = Some(s.tp > 1);
    if request.base.cp_comm_type.is_none() {
        if let Some(a2a) = hierarchical_a2a_size(request, s) {
            cfg.cp_comm_type = Some(CpCommType::A2aP2p);
            cfg.hierarchical_context_parallel_sizes = Some(vec![a2a, s.cp / a2a]);
        }
    }
    if let Some((kind, backend)) = s.dispatcher {
        cfg.moe_token_dispatcher_type = Some(kind);
        cfg.moe_flex_dispatcher_backend = backend;
    }
    apply_levers(&mut cfg, preset, lever);
    Ok(cfg)
}

/// Sets a lever set on a candidate: the recompute preset (unless the request fixed its own
/// recompute), a full optimizer offload, FSDP sharding.
pub fn apply_levers(cfg: &mut TrainingConfig, preset: &TrainingConfig, lever: &LeverSet) {
    if cfg.recompute_granularity.is_none() && cfg.recompute_modules.is_none() {
        cfg.recompute_granularity = preset.recompute_granularity;
        cfg.recompute_modules = preset.recompute_modules.clone();
        cfg.recompute_method = preset.recompute_method;
        cfg.recompute_num_layers = preset.recompute_num_layers;
    }
    if lever.offload {
        cfg.optimizer_cpu_offload = Some(true);
        cfg.optimizer_offload_fraction = Some(1.0);
        // Megatron-LM's offload README pairs it with the precision-aware optimizer, which
        // moves the fp32 master copy to the host too (without it the master stays on the GPU).
        cfg.use_precision_aware_optimizer = Some(true);
    }
    if lever.fsdp {
        cfg.use_megatron_fsdp = Some(true);
        cfg.data_parallel_sharding_strategy = Some(FsdpStrategy::OptimGradsParams);
    }
}

/// The all-to-all size of `a2a+p2p` for a CP group that leaves the NVLink domain: the CP
/// ranks one domain holds, when the heads divide by it (Transformer Engine's all-to-all
/// splits query heads and KV groups). Megatron-Bridge's performance guide
/// (docs/performance-guide.md) prefers `a2a+p2p` for big CP, with the all-to-all inside NVLink
/// and the ring across it: a plain ring over the network carries every step's K and V on
/// the slowest link. `None` keeps the ring.
fn hierarchical_a2a_size(request: &SearchRequest<'_>, s: &Structure) -> Option<u32> {
    let domain = request.resolved.hardware.nvlink_domain_size;
    if s.cp <= 1 || s.tp.checked_mul(s.cp)? <= domain {
        return None;
    }
    let a2a = domain / s.tp.max(1);
    (a2a >= 2
        && s.cp.is_multiple_of(a2a)
        && request
            .resolved
            .arch
            .all_to_all_splits_heads(u64::from(s.tp), u64::from(a2a)))
    .then_some(a2a)
}

/// What a search answer assumed: the searched layout fields are the answer, not defaults, so
/// only the settings the search did not choose are listed (precision, optimizer, ...), plus the
/// hardware card when the tool picked it.
pub fn search_notes(chosen: &TrainingConfig, defaulted_hardware: Option<&Hardware>) -> InputNotes {
    let mut notes = InputNotes::for_config(chosen, None);
    notes.assumed_defaults.retain(|a| {
        !matches!(
            a.key.as_str(),
            "tensor_model_parallel_size"
                | "pipeline_model_parallel_size"
                | "virtual_pipeline_model_parallel_size"
                | "context_parallel_size"
                | "expert_model_parallel_size"
                | "expert_tensor_parallel_size"
                | "sequence_parallel"
                | "micro_batch_size"
                | "recompute_granularity"
                | "optimizer_cpu_offload"
                | "use_distributed_optimizer"
        )
    });
    if let Some(hw) = defaulted_hardware {
        notes.assume(
            "hardware",
            serde_json::Value::String(hw.id.clone()),
            "not given; the most common training GPU is assumed",
        );
    }
    notes
}

/// The base configuration of a search request from the tool's flat inputs.
pub fn search_base(
    model: &ModelSpec,
    hardware: &str,
    num_gpus: u32,
    seq_length: u64,
    precision: Option<Precision>,
    base: Option<&TrainingConfig>,
) -> TrainingConfig {
    let mut cfg = base.cloned().unwrap_or_default();
    cfg.model = Some(model.clone());
    cfg.hardware = Some(hardware.to_string());
    cfg.num_gpus = Some(num_gpus);
    cfg.seq_length = Some(seq_length);
    // Unset stays unset: the configuration's default (BF16) applies and is reported as assumed.
    cfg.precision = precision.or(cfg.precision);
    cfg
}

pub fn plan_layouts(
    catalog: &Catalog,
    input: PlanLayoutsInput,
) -> Result<PlanLayoutsOutput, ToolError> {
    check_plan_input(&input)?;
    let cards = catalog.cost();
    let mut probe = TrainingConfig {
        model: Some(input.model.clone()),
        hardware: Some(input.hardware.clone()),
        num_gpus: Some(input.num_gpus),
        seq_length: Some(input.seq_length),
        global_batch_size: input.global_batch_size,
        ..TrainingConfig::default()
    };
    let resolved = resolve(cards, &probe)?;
    let top_k = input.top_k.unwrap_or(5).clamp(1, 50) as usize;
    probe = search_base(
        &input.model,
        &input.hardware,
        input.num_gpus,
        input.seq_length,
        input.precision,
        input.base.as_ref(),
    );
    let outcome = search(&SearchRequest {
        resolved: &resolved,
        base: probe,
        constraints: input.constraints.clone(),
        global_batch_size: input.global_batch_size,
        describe_best: top_k,
    });
    let feasible = outcome.feasible;
    let candidates: Vec<Candidate> = outcome
        .ranked
        .iter()
        .take(top_k)
        .enumerate()
        .map(|(i, (cfg, est))| Candidate {
            rank: i as u32 + 1,
            layout: layout_label(est),
            recompute: recompute_label(cfg),
            levers: levers_label(cfg, est),
            config: cfg.clone(),
            predicted: Prediction::of(est),
        })
        .collect();
    let mut notes = match outcome.ranked.first() {
        Some((best, _)) => search_notes(best, None),
        None => InputNotes::default(),
    };
    notes.note_calibration(cards, Some(&resolved.hardware.id));
    let rationale = plan_rationale(&resolved, &input, &outcome, &candidates) + &notes.markdown();
    if candidates.is_empty() {
        return Err(ToolError::Infeasible(rationale));
    }
    Ok(PlanLayoutsOutput {
        notes,
        candidates,
        considered: outcome.considered,
        evaluated: outcome.evaluated,
        feasible,
        dominated: outcome.dominated,
        rejected: outcome.rejected,
        rationale,
        citations: citations(
            catalog,
            &[
                ("moe-parallelism-and-recompute", "choosing"),
                ("moe-optimization-workflow", "parallel folding"),
                ("moe-long-context", "cp sizing"),
            ],
        ),
    })
}

/// The sizes of a plan request against `crate::model::limits` (the search's own products
/// stay in range only if its inputs do).
fn check_plan_input(input: &PlanLayoutsInput) -> Result<(), ToolError> {
    use crate::model::limits::{self as l, check_config};
    l::NUM_GPUS.check("", Some(u64::from(input.num_gpus)))?;
    l::SEQ_LENGTH.check("", Some(input.seq_length))?;
    l::GLOBAL_BATCH_SIZE.check("", input.global_batch_size.map(u64::from))?;
    l::HARDWARE_ID.check("", Some(&input.hardware))?;
    let c = &input.constraints;
    let p = "constraints.";
    let size = |v: Option<u32>| v.map(u64::from);
    l::TENSOR_PARALLEL.check(p, size(c.tensor_model_parallel_size))?;
    l::CONTEXT_PARALLEL.check(p, size(c.context_parallel_size))?;
    l::PIPELINE_PARALLEL.check(p, size(c.pipeline_model_parallel_size))?;
    l::EXPERT_PARALLEL.check(p, size(c.expert_model_parallel_size))?;
    l::MICRO_BATCH_SIZE.check(p, size(c.micro_batch_size))?;
    for (limit, field, value) in [
        (l::TENSOR_PARALLEL, "max_tp", c.max_tp),
        (l::PIPELINE_PARALLEL, "max_pp", c.max_pp),
        (l::CONTEXT_PARALLEL, "max_cp", c.max_cp),
        (l::EXPERT_PARALLEL, "max_ep", c.max_ep),
    ] {
        l::Limit { field, ..limit }.check(p, size(value))?;
    }
    l::MIN_HEADROOM_GIB.check_f64(p, c.min_headroom_gib)?;
    if let Some(base) = &input.base {
        check_config(base, "base.")?;
    }
    Ok(())
}

fn plan_rationale(
    resolved: &Resolved<'_>,
    input: &PlanLayoutsInput,
    outcome: &SearchOutcome,
    candidates: &[Candidate],
) -> String {
    let mut text = format!(
        "Searched {} layouts of {} on {} × {} at {} tokens: {} evaluated, {} fit, {} skipped as dominated.",
        outcome.considered,
        resolved.arch.display_name,
        input.num_gpus,
        resolved.hardware.display_name,
        input.seq_length,
        outcome.evaluated,
        outcome.feasible,
        outcome.dominated,
    );
    if let Some(best) = candidates.first() {
        text.push_str(&format!(
            "\n\nBest: **{}**, recompute {}, predicted {:.0} TFLOP/s/GPU{}, {:.0} tokens/s/GPU, peak {:.1} of {:.1} GiB.",
            best.layout,
            best.recompute,
            best.predicted.model_tflops_per_gpu,
            best.predicted.band_text(),
            best.predicted.tokens_per_second_per_gpu,
            best.predicted.peak_gib,
            best.predicted.capacity_gib
        ));
    } else if let Some((cfg, est)) = &outcome.closest_miss {
        text.push_str(&format!(
            "\n\nNothing fits. The lowest-memory layout evaluated, {} with recompute {}, needs {:.1} GiB of {:.1} GiB: add GPUs, allow more levers, or shorten the sequence.",
            layout_label(est),
            recompute_label(cfg),
            round(est.memory.peak_gib, 1),
            est.memory.capacity_gib
        ));
    } else {
        text.push_str("\n\nNo layout passed the divisibility rules: check num_gpus against the model's heads, experts and layers.");
    }
    let mut reasons: Vec<(&String, &u64)> = outcome.rejected.iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(a.1));
    if !reasons.is_empty() {
        let listed: Vec<String> = reasons
            .iter()
            .take(5)
            .map(|(reason, count)| format!("{reason} {count}"))
            .collect();
        text.push_str(&format!("\n\nRejected: {}.", listed.join(", ")));
    }
    text
}
