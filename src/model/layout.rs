//! Parallel layout: group sizes, microbatches, and which decoder layers sit on which
//! (virtual) pipeline stage, including Megatron's uneven splits and layout strings.

use super::arch::Architecture;
use super::config::TrainingConfig;

/// One virtual pipeline stage (a model chunk on one pipeline rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VirtualStage {
    pub first_layer: u32,
    pub num_layers: u32,
    pub embedding: bool,
    pub loss: bool,
    pub mtp: bool,
}

/// Group sizes after defaults, plus the stage map.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedLayout {
    pub world: u32,
    pub tp: u32,
    pub cp: u32,
    pub pp: u32,
    pub vpp: u32,
    pub ep: u32,
    pub etp: u32,
    pub dp: u32,
    pub edp: u32,
    pub mbs: u32,
    pub gbs: u32,
    /// Microbatches per pipeline per step (gbs / (mbs·dp)).
    pub microbatches: u32,
    pub seq: u64,
    pub sequence_parallel: bool,
    /// Virtual stages in model order: stage `v` runs on pipeline rank `v % pp`.
    pub stages: Vec<VirtualStage>,
    /// Layers per stage differ.
    pub uneven: bool,
}

/// A problem found while resolving the layout: (code, message, fix).
pub type Issue = (&'static str, String, String);

impl ResolvedLayout {
    /// Virtual stages held by pipeline rank `rank`, in schedule order.
    pub fn rank_stages(&self, rank: u32) -> impl Iterator<Item = (u32, &VirtualStage)> {
        let pp = self.pp.max(1) as usize;
        self.stages
            .iter()
            .enumerate()
            .skip(rank as usize)
            .step_by(pp)
            .map(move |(v, s)| ((v / pp) as u32, s))
    }

    pub fn layers_on_rank(&self, rank: u32) -> u32 {
        self.rank_stages(rank).map(|(_, s)| s.num_layers).sum()
    }
}

fn nonzero(value: Option<u32>, name: &'static str, issues: &mut Vec<Issue>) -> u32 {
    match value {
        Some(0) => {
            issues.push((
                "zero_size",
                format!("`{name}` is 0"),
                format!("set `{name}` to a positive integer (1 disables that parallelism)"),
            ));
            1
        }
        Some(v) => v,
        None => 1,
    }
}

/// Distribute `n` items over `k` slots as evenly as possible; extra items go to the slots
/// in `order` first.
fn distribute(n: u32, k: usize, order: &[usize], out: &mut [u32]) {
    if k == 0 {
        return;
    }
    let base = n / k as u32;
    let rem = (n % k as u32) as usize;
    for slot in out.iter_mut().take(k) {
        *slot = base;
    }
    for &slot in order.iter().take(rem) {
        out[slot] += 1;
    }
}

/// Expand a Megatron pipeline layout string (`E`, `t`, `m`, `L`, `|`, `(..)*n`, `x*n`) into
/// its stage pieces.
pub fn expand_pipeline_layout(layout: &str) -> Result<Vec<String>, String> {
    fn parse_seq(chars: &[char], pos: &mut usize, depth: u32) -> Result<String, String> {
        let mut out = String::new();
        while *pos < chars.len() {
            let c = chars[*pos];
            let item = match c {
                ')' => {
                    if depth == 0 {
                        return Err(format!("unmatched `)` at position {}", *pos));
                    }
                    return Ok(out);
                }
                '(' => {
                    *pos += 1;
                    let inner = parse_seq(chars, pos, depth + 1)?;
                    if *pos >= chars.len() || chars[*pos] != ')' {
                        return Err("missing `)`".into());
                    }
                    inner
                }
                'E' | 't' | 'm' | 'L' | '|' => c.to_string(),
                c if c.is_whitespace() || c == ',' => {
                    *pos += 1;
                    continue;
                }
                other => {
                    return Err(format!(
                        "unexpected `{other}` at position {} (allowed: E t m L | ( ) *N)",
                        *pos
                    ))
                }
            };
            *pos += 1;
            let mut repeat = 1usize;
            if *pos < chars.len() && chars[*pos] == '*' {
                *pos += 1;
                let start = *pos;
                while *pos < chars.len() && chars[*pos].is_ascii_digit() {
                    *pos += 1;
                }
                let digits: String = chars[start..*pos].iter().collect();
                repeat = digits
                    .parse()
                    .map_err(|_| format!("expected a number after `*` at position {start}"))?;
                if repeat > 100_000 {
                    return Err("repeat count too large".into());
                }
            }
            for _ in 0..repeat {
                out.push_str(&item);
            }
            if out.len() > 1_000_000 {
                return Err("layout expands to more than a million symbols".into());
            }
        }
        if depth > 0 {
            return Err("missing `)`".into());
        }
        Ok(out)
    }
    let chars: Vec<char> = layout.chars().collect();
    let mut pos = 0;
    let flat = parse_seq(&chars, &mut pos, 0)?;
    Ok(flat.split('|').map(str::to_string).collect())
}

/// Resolve group sizes and the stage map. `loss_stage_layers` is the work of the output
/// layer and MTP blocks in units of an average decoder layer (used to balance uneven
/// splits). Problems are returned as issues, never panics.
pub fn resolve(
    arch: &Architecture,
    cfg: &TrainingConfig,
    mtp_layers: u32,
    loss_stage_layers: f64,
    issues: &mut Vec<Issue>,
    warnings: &mut Vec<String>,
) -> ResolvedLayout {
    let tp = nonzero(
        cfg.tensor_model_parallel_size,
        "tensor_model_parallel_size",
        issues,
    );
    let cp = nonzero(cfg.context_parallel_size, "context_parallel_size", issues);
    let pp = nonzero(
        cfg.pipeline_model_parallel_size,
        "pipeline_model_parallel_size",
        issues,
    );
    let mut vpp = nonzero(
        cfg.virtual_pipeline_model_parallel_size,
        "virtual_pipeline_model_parallel_size",
        issues,
    );
    let mut pp = pp;
    if u64::from(pp) * u64::from(vpp) > u64::from(arch.num_layers.max(1)) * 4 + 64 {
        issues.push((
            "too_many_stages",
            format!(
                "PP·VPP = {} stages for {} layers",
                u64::from(pp) * u64::from(vpp),
                arch.num_layers
            ),
            format!("use PP·VPP ≤ {}", arch.num_layers),
        ));
        pp = pp.min(arch.num_layers.max(1));
        vpp = 1;
    }
    let ep = nonzero(
        cfg.expert_model_parallel_size,
        "expert_model_parallel_size",
        issues,
    );
    let etp = nonzero(
        cfg.expert_tensor_parallel_size,
        "expert_tensor_parallel_size",
        issues,
    );
    let mbs = nonzero(cfg.micro_batch_size, "micro_batch_size", issues);
    let seq = match cfg.seq_length {
        Some(0) => {
            issues.push((
                "zero_size",
                "`seq_length` is 0".into(),
                "set `seq_length` to the training sequence length".into(),
            ));
            4096
        }
        Some(s) => s,
        None => {
            warnings.push("seq_length not set; assuming 4096".into());
            4096
        }
    };
    let attn_group = tp.saturating_mul(cp).saturating_mul(pp).max(1);
    let expert_group = etp.saturating_mul(ep).saturating_mul(pp).max(1);
    let world = match cfg.num_gpus {
        Some(0) => {
            issues.push((
                "zero_size",
                "`num_gpus` is 0".into(),
                format!(
                    "set `num_gpus` to a multiple of {}",
                    lcm(attn_group, expert_group)
                ),
            ));
            lcm(attn_group, expert_group)
        }
        Some(n) => n,
        None => {
            let n = lcm(attn_group, expert_group);
            warnings.push(format!(
                "num_gpus not set; assuming {n} (the smallest world for this layout)"
            ));
            n
        }
    };
    if world % attn_group != 0 {
        let fixed = world / attn_group * attn_group;
        issues.push((
            "world_not_divisible",
            format!(
                "num_gpus {world} is not divisible by TP·CP·PP = {tp}·{cp}·{pp} = {attn_group}"
            ),
            format!(
                "use a multiple of {attn_group} GPUs (e.g. {}) or change TP/CP/PP",
                fixed.max(attn_group)
            ),
        ));
    }
    if world % expert_group != 0 {
        issues.push((
            "expert_world_not_divisible",
            format!(
                "num_gpus {world} is not divisible by ETP·EP·PP = {etp}·{ep}·{pp} = {expert_group}"
            ),
            format!("use a multiple of {expert_group} GPUs or lower expert_model_parallel_size"),
        ));
    }
    let dp = (world / attn_group).max(1);
    let edp = (world / expert_group).max(1);
    // Megatron-Core splits DP·CP and expert DP into the optimizer's copies
    // (`initialize_model_parallel`, parallel_state.py) and asserts both divide.
    let copies = cfg.optimizer_instances();
    let dp_cp = dp.saturating_mul(cp);
    if copies > 1 && (!dp_cp.is_multiple_of(copies) || !edp.is_multiple_of(copies)) {
        issues.push((
            "optimizer_instances_not_divisible",
            format!(
                "num_distributed_optimizer_instances {copies} must divide both DP·CP = {dp_cp} and expert DP = {edp}"
            ),
            format!(
                "use a number of copies that divides both (their greatest common divisor is {}), or 1",
                gcd(dp_cp, edp)
            ),
        ));
    }

    let gbs = match cfg.global_batch_size {
        Some(0) => {
            issues.push((
                "zero_size",
                "`global_batch_size` is 0".into(),
                "set `global_batch_size` to a multiple of micro_batch_size·DP".into(),
            ));
            mbs.saturating_mul(dp)
        }
        Some(g) => g,
        None => {
            let g = mbs
                .saturating_mul(dp)
                .saturating_mul(pp.saturating_mul(4).max(8));
            warnings.push(format!(
                "global_batch_size not set; assuming {g} ({} microbatches per pipeline)",
                pp.saturating_mul(4).max(8)
            ));
            g
        }
    };
    let per_step = mbs.saturating_mul(dp).max(1);
    if gbs % per_step != 0 {
        issues.push((
            "gbs_not_divisible",
            format!(
                "global_batch_size {gbs} is not divisible by micro_batch_size·DP = {mbs}·{dp} = {per_step}"
            ),
            format!(
                "use global_batch_size {} (a multiple of {per_step})",
                (gbs / per_step).max(1).saturating_mul(per_step)
            ),
        ));
    }
    let microbatches = (gbs / per_step).max(1);

    if vpp > 1 && pp == 1 {
        issues.push((
            "vpp_without_pp",
            format!("virtual_pipeline_model_parallel_size {vpp} needs pipeline parallelism"),
            "set virtual_pipeline_model_parallel_size to 1 or use pipeline_model_parallel_size > 1"
                .into(),
        ));
    }
    let sequence_parallel = cfg.sequence_parallel();

    // Stage map.
    let mut stages: Vec<VirtualStage> = Vec::new();
    let layers = arch.num_layers;
    if let Some(layout) = cfg.pipeline_model_parallel_layout.as_deref() {
        match expand_pipeline_layout(layout) {
            Ok(pieces) => {
                let n = pieces.len() as u32;
                if !n.is_multiple_of(pp) {
                    issues.push((
                        "pipeline_layout_stages",
                        format!("pipeline_model_parallel_layout has {n} stages, not a multiple of PP={pp}"),
                        format!("write PP·VPP = {} stages separated by `|`", pp.saturating_mul(vpp)),
                    ));
                } else if cfg.virtual_pipeline_model_parallel_size.is_some() && n != pp * vpp {
                    issues.push((
                        "pipeline_layout_stages",
                        format!(
                            "pipeline_model_parallel_layout has {n} stages but PP·VPP = {}",
                            pp * vpp
                        ),
                        format!(
                            "set virtual_pipeline_model_parallel_size to {} or rewrite the layout",
                            n / pp
                        ),
                    ));
                } else {
                    vpp = n / pp;
                }
                let mut next = 0u32;
                for piece in &pieces {
                    let t = piece.chars().filter(|c| *c == 't').count() as u32;
                    stages.push(VirtualStage {
                        first_layer: next,
                        num_layers: t,
                        embedding: piece.contains('E'),
                        loss: piece.contains('L'),
                        mtp: piece.contains('m'),
                    });
                    next += t;
                }
                if next != layers {
                    issues.push((
                        "pipeline_layout_layers",
                        format!("pipeline_model_parallel_layout places {next} decoder layers; the model has {layers}"),
                        format!("use exactly {layers} `t` symbols"),
                    ));
                }
                let m_count: u32 = pieces
                    .iter()
                    .map(|p| p.chars().filter(|c| *c == 'm').count() as u32)
                    .sum();
                if m_count != mtp_layers {
                    warnings.push(format!(
                        "pipeline layout places {m_count} MTP layers; the configuration trains {mtp_layers}"
                    ));
                }
            }
            Err(e) => issues.push((
                "pipeline_layout_syntax",
                format!("cannot parse pipeline_model_parallel_layout: {e}"),
                "use Megatron's syntax, e.g. \"Et|(tt|)*30mL\"".into(),
            )),
        }
    }
    let account_embedding = u32::from(cfg.account_for_embedding_in_pipeline_split.unwrap_or(false));
    let account_loss = u32::from(cfg.account_for_loss_in_pipeline_split.unwrap_or(false));
    if stages.is_empty() {
        let v = (pp as usize) * (vpp as usize);
        let mut counts = vec![0u32; v];
        let first = cfg.num_layers_in_first_pipeline_stage;
        let last = cfg.num_layers_in_last_pipeline_stage;
        if (first.is_some() || last.is_some()) && pp > 1 {
            // The first/last pipeline rank hold the given number of layers, spread over
            // their virtual stages; the middle ranks share the rest.
            let f = first.unwrap_or(0);
            let l = last.unwrap_or(0);
            let first_slots: Vec<usize> = (0..v).filter(|i| i % pp as usize == 0).collect();
            let last_slots: Vec<usize> = (0..v)
                .filter(|i| i % pp as usize == pp as usize - 1)
                .collect();
            let middle_slots: Vec<usize> = (0..v)
                .filter(|i| {
                    let r = i % pp as usize;
                    (first.is_none() || r != 0) && (last.is_none() || r != pp as usize - 1)
                })
                .collect();
            let fixed = f.saturating_add(l);
            if fixed > layers {
                issues.push((
                    "pipeline_first_last_layers",
                    format!(
                        "first+last pipeline stages hold {fixed} layers; the model has {layers}"
                    ),
                    "lower num_layers_in_first/last_pipeline_stage".into(),
                ));
            }
            let rest = layers.saturating_sub(fixed);
            let mut tmp = vec![0u32; v];
            if first.is_some() {
                let order: Vec<usize> = (0..first_slots.len()).collect();
                distribute(f, first_slots.len(), &order, &mut tmp);
                for (j, &slot) in first_slots.iter().enumerate() {
                    counts[slot] = tmp[j];
                }
            }
            if last.is_some() {
                let order: Vec<usize> = (0..last_slots.len()).collect();
                distribute(l, last_slots.len(), &order, &mut tmp);
                for (j, &slot) in last_slots.iter().enumerate() {
                    counts[slot] = tmp[j];
                }
            }
            if middle_slots.is_empty() {
                if rest > 0 {
                    issues.push((
                        "pipeline_first_last_layers",
                        format!("{rest} layers are left for no middle stage"),
                        "make num_layers_in_first + last pipeline stage equal the layer count"
                            .into(),
                    ));
                }
            } else {
                distribute(
                    rest,
                    middle_slots.len(),
                    &(0..middle_slots.len()).collect::<Vec<_>>(),
                    &mut tmp,
                );
                for (j, &slot) in middle_slots.iter().enumerate() {
                    counts[slot] = tmp[j];
                }
            }
        } else if account_embedding + account_loss > 0 && v > 1 {
            // The embedding and/or the loss take one layer slot each; the slots are split
            // evenly and the first / last virtual stage build one decoder layer fewer.
            let slots = layers + account_embedding + account_loss;
            let order: Vec<usize> = (0..v).collect();
            distribute(slots, v, &order, &mut counts);
            counts[0] = counts[0].saturating_sub(account_embedding);
            counts[v - 1] = counts[v - 1].saturating_sub(account_loss);
        } else if layers.is_multiple_of(v as u32) || v == 1 {
            // Megatron's default: an even split.
            distribute(layers, v, &[], &mut counts);
        } else {
            // Layers do not divide: model the balanced layout a recipe would write, in
            // which the last virtual stage counts the output layer and MTP blocks as
            // `loss_stage_layers` layers of work.
            let total = layers as f64 + loss_stage_layers.max(0.0);
            let per = total / v as f64;
            let mut assigned = 0u32;
            for (i, slot) in counts.iter_mut().enumerate().take(v - 1) {
                let end = (((i + 1) as f64 * per).round() as u32).clamp(assigned, layers);
                *slot = end - assigned;
                assigned = end;
            }
            counts[v - 1] = layers - assigned;
        }
        let mut next = 0;
        for (i, &n) in counts.iter().enumerate() {
            stages.push(VirtualStage {
                first_layer: next,
                num_layers: n,
                embedding: i == 0,
                loss: i + 1 == v,
                mtp: i + 1 == v && mtp_layers > 0,
            });
            next += n;
        }
    }
    let min = stages.iter().map(|s| s.num_layers).min().unwrap_or(0);
    let max = stages.iter().map(|s| s.num_layers).max().unwrap_or(0);
    let uneven = min != max;
    // An even split that does not divide is Megatron's refusal; `megatron_rules` reports it
    // with the modelled counts.
    if min == 0 && !stages.is_empty() && layers >= (pp * vpp) {
        warnings.push("some virtual stages hold no decoder layer".into());
    }
    // The embedding and the loss fill a stage's slot each where the split accounts for them
    // (Llama-3.1 405B's 126 layers on PP16 VP8 in Megatron-Bridge's GB200 recipes).
    let slots = layers + account_embedding + account_loss;
    if slots < pp * vpp && cfg.pipeline_model_parallel_layout.is_none() {
        issues.push((
            "too_many_stages",
            format!(
                "{layers} layers{} cannot fill PP·VPP = {} stages",
                if slots > layers {
                    format!(
                        " and the {} slots the split gives the embedding and the loss",
                        slots - layers
                    )
                } else {
                    String::new()
                },
                pp * vpp
            ),
            format!("use PP·VPP ≤ {slots}"),
        ));
    }

    ResolvedLayout {
        world,
        tp,
        cp,
        pp,
        vpp,
        ep,
        etp,
        dp,
        edp,
        mbs,
        gbs,
        microbatches,
        seq,
        sequence_parallel,
        stages,
        uneven,
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a.max(1)
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u32, b: u32) -> u32 {
    (a / gcd(a, b)).saturating_mul(b).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_string_expands() {
        let pieces = expand_pipeline_layout("Et|(tt|)*30mL").unwrap();
        assert_eq!(pieces.len(), 32);
        assert_eq!(pieces[0], "Et");
        assert_eq!(pieces[1], "tt");
        assert_eq!(pieces[31], "mL");
        let t: usize = pieces.iter().map(|p| p.matches('t').count()).sum();
        assert_eq!(t, 61);
    }

    #[test]
    fn layout_string_errors() {
        assert!(expand_pipeline_layout("Et|(tt|*3").is_err());
        assert!(expand_pipeline_layout("Ex").is_err());
        assert!(expand_pipeline_layout("t)").is_err());
    }

    #[test]
    fn distribute_even_and_uneven() {
        let mut out = [0u32; 4];
        distribute(10, 4, &[1, 2, 3, 0], &mut out);
        assert_eq!(out, [2, 3, 3, 2]);
    }
}
