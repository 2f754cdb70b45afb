//! The layout search itself: structures enumerated and filtered by the layout rules, memory
//! levers tried from the cheapest up with dominated sets skipped, candidates priced in
//! parallel, and the closest misses kept for the answer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

use super::{LayoutConstraints, DEFAULT_TOKENS_PER_STEP, THROUGHPUT_TIE};
use crate::model::config::{
    CpCommType, FlexBackend, FsdpStrategy, RecomputeGranularity, RecomputeMethod, RecomputeModule,
    TokenDispatcher,
};
use crate::model::{
    evaluate, evaluate_memory_first, evaluate_memory_only, Architecture, Estimate, TrainingConfig,
    ValidArchitecture,
};
use crate::tools::common::{layout_violations, Resolved};

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
                                // With one expert group no tokens move: the dispatchers
                                // price the same, so only the default is searched.
                                if ep == 1 && dispatcher.is_some() {
                                    continue;
                                }
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
