//! The range of every size a user can give, in one place. The tools check their inputs against
//! these bounds before any arithmetic (an error names the field, the range and why), and the
//! same table states them in the JSON schemas (`minimum`/`maximum`/`maxLength`), so a client
//! sees the limits before it calls.
//!
//! The bounds are far above anything a real run uses and far below what would overflow the
//! arithmetic: every product of two or three bounded sizes fits in a `u64` (and the layout
//! products the model forms in `u32` stay below 2^32), so a bounded input cannot panic, wrap,
//! or make a search loop forever.

use schemars::Schema;
use serde_json::{Map, Value};

use super::arch::Architecture;
use super::config::TrainingConfig;

/// An inclusive numeric range for one input field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub field: &'static str,
    pub min: f64,
    pub max: f64,
    /// Why the bound is where it is; part of the error message.
    pub why: &'static str,
}

/// A maximum length in bytes for one string field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthLimit {
    pub field: &'static str,
    pub max: usize,
    pub why: &'static str,
}

const fn limit(field: &'static str, min: f64, max: f64, why: &'static str) -> Limit {
    Limit {
        field,
        min,
        max,
        why,
    }
}

const fn length(field: &'static str, max: usize, why: &'static str) -> LengthLimit {
    LengthLimit { field, max, why }
}

// ---- training configuration sizes ----

/// 2^20: about ten times the largest published training clusters (~100k GPUs).
pub const NUM_GPUS: Limit = limit(
    "num_gpus",
    1.0,
    1_048_576.0,
    "2^20 GPUs is about ten times the largest training cluster built",
);
/// 2^25 tokens: three times the longest published training context (10M tokens).
pub const SEQ_LENGTH: Limit = limit(
    "seq_length",
    1.0,
    33_554_432.0,
    "2^25 tokens is three times the longest published training context",
);
/// Long-context recipes use 1; short-context ones at most 16.
pub const MICRO_BATCH_SIZE: Limit = limit(
    "micro_batch_size",
    1.0,
    1024.0,
    "recipes use 1 to 16 sequences per microbatch",
);
/// Published runs stay below 2^16 sequences per step.
pub const GLOBAL_BATCH_SIZE: Limit = limit(
    "global_batch_size",
    1.0,
    16_777_216.0,
    "published runs use fewer than 2^16 sequences per step",
);
/// TP stays inside one NVLink domain; the largest has 576 GPUs.
pub const TENSOR_PARALLEL: Limit = limit(
    "tensor_model_parallel_size",
    1.0,
    1024.0,
    "TP spans one NVLink domain, at most 576 GPUs today",
);
/// At most one stage per layer, and no model card has more than a few hundred layers.
pub const PIPELINE_PARALLEL: Limit = limit(
    "pipeline_model_parallel_size",
    1.0,
    1024.0,
    "a pipeline stage holds at least one layer",
);
pub const VIRTUAL_PIPELINE_PARALLEL: Limit = limit(
    "virtual_pipeline_model_parallel_size",
    1.0,
    1024.0,
    "a virtual stage holds at least one layer",
);
/// CP splits one sequence over GPUs: bounded by the GPU count.
pub const CONTEXT_PARALLEL: Limit = limit(
    "context_parallel_size",
    1.0,
    1_048_576.0,
    "CP cannot exceed the GPU limit",
);
/// Each level of hierarchical CP divides CP.
pub const HIERARCHICAL_CP_SIZE: Limit = limit(
    "hierarchical_context_parallel_sizes",
    1.0,
    1_048_576.0,
    "each level's size divides context_parallel_size",
);
/// EP divides the experts; no published model has more than a few thousand.
pub const EXPERT_PARALLEL: Limit = limit(
    "expert_model_parallel_size",
    1.0,
    65_536.0,
    "EP divides the experts, at most 2^16 of them",
);
pub const EXPERT_TENSOR_PARALLEL: Limit = limit(
    "expert_tensor_parallel_size",
    1.0,
    1024.0,
    "ETP spans one NVLink domain, like TP",
);
/// Layer counts: ten times the deepest published decoder (~128 layers), rounded to 2^12.
pub const LAYERS: Limit = limit(
    "num_layers",
    1.0,
    4096.0,
    "no published decoder has more than a few hundred layers",
);
pub const RECOMPUTE_NUM_LAYERS: Limit = limit(
    "recompute_num_layers",
    0.0,
    4096.0,
    "at most every layer of a stage",
);
pub const FIRST_STAGE_LAYERS: Limit = limit(
    "num_layers_in_first_pipeline_stage",
    0.0,
    4096.0,
    "at most every layer of the model",
);
pub const LAST_STAGE_LAYERS: Limit = limit(
    "num_layers_in_last_pipeline_stage",
    0.0,
    4096.0,
    "at most every layer of the model",
);
/// Published models predict at most a handful of extra tokens.
pub const MTP_LAYERS: Limit = limit(
    "mtp_num_layers",
    0.0,
    64.0,
    "published models use 1 to 3 MTP layers",
);
pub const EP_OVERLAP_CHUNKS: Limit = limit(
    "moe_ep_overlap_chunks",
    0.0,
    1024.0,
    "more chunks than tokens per microbatch do not overlap anything",
);
const fn dispatcher_sms(field: &'static str) -> Limit {
    limit(field, 1.0, 1024.0, "a GPU has at most a few hundred SMs")
}
pub const FLEX_DISPATCHER_SMS: Limit = dispatcher_sms("moe_flex_dispatcher_num_sms");
pub const DEEPEP_SMS: Limit = dispatcher_sms("moe_deepep_num_sms");
pub const HYBRIDEP_SMS: Limit = dispatcher_sms("moe_hybridep_num_sms");
pub const EXPERT_CAPACITY_FACTOR: Limit = limit(
    "moe_expert_capacity_factor",
    -1024.0,
    1024.0,
    "a multiple of the balanced load (negative: dropless); above the expert count nothing can be dropped",
);
pub const RANK_CAPACITY_FACTOR: Limit = limit(
    "moe_expert_rank_capacity_factor",
    0.01,
    1024.0,
    "a multiple of the balanced load; above the EP size no budget can bind",
);
pub const OFFLOAD_FRACTION: Limit = limit(
    "optimizer_offload_fraction",
    0.0,
    1.0,
    "a fraction of the optimizer state",
);
pub const ACTIVATION_OFFLOAD_FRACTION: Limit = limit(
    "activation_offload_fraction",
    0.0,
    1.0,
    "a fraction of the offloading modules' groups (Megatron-Core asserts [0, 1])",
);

pub const CPU_OFFLOADING_LAYERS: Limit = limit(
    "cpu_offloading_num_layers",
    0.0,
    100_000.0,
    "a number of the model's layers",
);

pub const ATTENTION_DROPOUT: Limit = limit(
    "attention_dropout",
    0.0,
    1.0,
    "a probability (PyTorch's dropout takes 0 to 1)",
);

/// Parameters per data-parallel bucket: 2^40 is above the parameter count of any model.
pub const DDP_BUCKET_SIZE: Limit = limit(
    "ddp_bucket_size",
    1.0,
    1_099_511_627_776.0,
    "parameters per data-parallel bucket; 2^40 is above any model's parameter count",
);

/// Data-parallel buckets per rank: 2^20 is far above any useful count.
pub const DDP_NUM_BUCKETS: Limit = limit(
    "ddp_num_buckets",
    1.0,
    1_048_576.0,
    "data-parallel buckets per rank; 2^20 is far above any useful count",
);

/// Distributed-optimizer copies: each needs at least one data-parallel rank, and 2^16 is
/// above any data-parallel size.
pub const OPTIMIZER_INSTANCES: Limit = limit(
    "num_distributed_optimizer_instances",
    1.0,
    65_536.0,
    "copies of the distributed optimizer across the data-parallel ranks (Megatron-LM's default is 1)",
);

// ---- tool-specific numbers ----

/// GPU memory: the largest GPU card has a few hundred GiB; a budget above the card's usable
/// memory is capped to it (the tool says so).
pub const MEMORY_BUDGET_GIB: Limit = limit(
    "memory_budget_gib",
    0.001,
    1_048_576.0,
    "a per-GPU budget in GiB; above the GPU's usable memory it is capped to it",
);
pub const MIN_HEADROOM_GIB: Limit = limit(
    "min_headroom_gib",
    0.0,
    1024.0,
    "free memory to keep per GPU, in GiB",
);

// ---- strings ----

/// Skill names are short identifiers; fuzzy matching a long one against every skill is slow.
pub const SKILL_NAME: LengthLimit = length(
    "name",
    256,
    "skill names are short identifiers; longer ones cannot match",
);
pub const SECTION: LengthLimit = length("section", 1024, "a heading path of a few headings");
pub const QUERY: LengthLimit = length("query", 1024, "a search query of a few words or a question");
pub const FILE: LengthLimit = length("file", 1024, "a path inside one skill folder");
pub const MODEL_ID: LengthLimit = length(
    "model",
    256,
    "model card ids are short; pass a config.json object for custom models",
);
pub const HARDWARE_ID: LengthLimit = length("hardware", 256, "hardware card ids are short");
/// A diff of a launch script or override file is a few KiB; 1 MiB covers any real one.
pub const DIFF: LengthLimit = length(
    "diff",
    1_048_576,
    "a diff of launch scripts and config files is far smaller",
);
/// A configuration file's text sent over MCP (a recipe, script, override file or a log's
/// argument dump).
pub const CONFIG_TEXT: LengthLimit = length(
    "config_text",
    16_777_216,
    "a configuration file, or a training log's argument dump, fits in a few MiB",
);
/// One Python module of a recipe package sent over MCP beside a recipe file.
pub const MODULE_TEXT: LengthLimit = length(
    "modules",
    1_048_576,
    "a Python module of a recipe package is far smaller",
);
/// The key of a module sent over MCP: its path in the checkout or its dotted name.
pub const MODULE_KEY: LengthLimit = length(
    "modules",
    1024,
    "a module is named by its path in the checkout or its dotted name",
);
/// A training log sent over MCP: the argument dump, the iteration and memory lines. Larger
/// logs are trimmed to the start (the dump) and the last iterations before sending.
pub const LOG: LengthLimit = length(
    "log",
    16_777_216,
    "a training log's argument dump and iteration lines fit in a few MiB",
);
pub const PIPELINE_LAYOUT: LengthLimit = length(
    "pipeline_model_parallel_layout",
    65_536,
    "a layout string names each stage once (repeats use `*N`)",
);

/// An attention switch's value in `attention_env` (Transformer Engine reads `0` or `1`).
pub const ENV_VALUE: LengthLimit = length(
    "attention_env",
    256,
    "an environment switch's value is a short word such as 0 or 1",
);

/// Resource and skill URIs (`skill://name/path#section`): a name, a path and a heading.
pub const URI: LengthLimit = length("uri", 4096, "a skill URI names one skill, file and section");
/// A prompt argument may carry a configuration or a diff.
pub const PROMPT_ARGUMENT: LengthLimit = length(
    "arguments",
    1_048_576,
    "a question, a configuration or a diff",
);
/// What a user has typed so far into one completion field.
pub const COMPLETION_VALUE: LengthLimit = length("argument.value", 1024, "a partial name or value");

/// Numeric limits by field name, for the schemas. Constraint names map to the size they
/// bound (`max_tp` is a TP size).
const NUMERIC: &[(&str, Limit)] = &[
    ("num_gpus", NUM_GPUS),
    ("seq_length", SEQ_LENGTH),
    ("micro_batch_size", MICRO_BATCH_SIZE),
    ("global_batch_size", GLOBAL_BATCH_SIZE),
    ("tensor_model_parallel_size", TENSOR_PARALLEL),
    ("max_tp", TENSOR_PARALLEL),
    ("pipeline_model_parallel_size", PIPELINE_PARALLEL),
    ("max_pp", PIPELINE_PARALLEL),
    (
        "virtual_pipeline_model_parallel_size",
        VIRTUAL_PIPELINE_PARALLEL,
    ),
    ("context_parallel_size", CONTEXT_PARALLEL),
    ("max_cp", CONTEXT_PARALLEL),
    ("expert_model_parallel_size", EXPERT_PARALLEL),
    ("max_ep", EXPERT_PARALLEL),
    ("expert_tensor_parallel_size", EXPERT_TENSOR_PARALLEL),
    ("recompute_num_layers", RECOMPUTE_NUM_LAYERS),
    ("num_layers_in_first_pipeline_stage", FIRST_STAGE_LAYERS),
    ("num_layers_in_last_pipeline_stage", LAST_STAGE_LAYERS),
    ("mtp_num_layers", MTP_LAYERS),
    ("moe_ep_overlap_chunks", EP_OVERLAP_CHUNKS),
    ("moe_flex_dispatcher_num_sms", FLEX_DISPATCHER_SMS),
    ("moe_deepep_num_sms", DEEPEP_SMS),
    ("moe_hybridep_num_sms", HYBRIDEP_SMS),
    ("moe_expert_capacity_factor", EXPERT_CAPACITY_FACTOR),
    ("moe_expert_rank_capacity_factor", RANK_CAPACITY_FACTOR),
    ("optimizer_offload_fraction", OFFLOAD_FRACTION),
    ("activation_offload_fraction", ACTIVATION_OFFLOAD_FRACTION),
    ("cpu_offloading_num_layers", CPU_OFFLOADING_LAYERS),
    ("attention_dropout", ATTENTION_DROPOUT),
    ("ddp_bucket_size", DDP_BUCKET_SIZE),
    ("ddp_num_buckets", DDP_NUM_BUCKETS),
    ("num_distributed_optimizer_instances", OPTIMIZER_INSTANCES),
    ("memory_budget_gib", MEMORY_BUDGET_GIB),
    ("min_headroom_gib", MIN_HEADROOM_GIB),
];

/// String limits by field name, for the schemas.
const STRINGS: &[LengthLimit] = &[
    SKILL_NAME,
    SECTION,
    QUERY,
    FILE,
    HARDWARE_ID,
    DIFF,
    LOG,
    PIPELINE_LAYOUT,
];

/// An input outside its range. Every message names the field, the range and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error(
        "field `{field}`: {value} is outside {min}..={max} ({why}); give a value in that range"
    )]
    OutOfRange {
        field: String,
        value: String,
        /// The bounds as written in the schema.
        min: String,
        max: String,
        why: &'static str,
    },
    #[error("field `{field}`: {len} bytes is longer than the limit of {max} ({why}); shorten it")]
    TooLong {
        field: String,
        len: usize,
        max: usize,
        why: &'static str,
    },
}

impl Limit {
    /// Checks an integer size; `prefix` places the field in its input (`config.`).
    pub fn check(&self, prefix: &str, value: Option<u64>) -> Result<(), LimitError> {
        match value {
            // u64 -> f64 rounds only above 2^53, far beyond every bound.
            Some(v) if (v as f64) < self.min || (v as f64) > self.max => {
                Err(self.error(prefix, v.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// Checks a float; NaN and infinities are outside every range.
    pub fn check_f64(&self, prefix: &str, value: Option<f64>) -> Result<(), LimitError> {
        match value {
            Some(v) if !(v.is_finite() && v >= self.min && v <= self.max) => {
                Err(self.error(prefix, v.to_string()))
            }
            _ => Ok(()),
        }
    }

    fn error(&self, prefix: &str, value: String) -> LimitError {
        LimitError::OutOfRange {
            field: format!("{prefix}{}", self.field),
            value,
            min: self.min.to_string(),
            max: self.max.to_string(),
            why: self.why,
        }
    }
}

impl LengthLimit {
    pub fn check(&self, prefix: &str, value: Option<&str>) -> Result<(), LimitError> {
        match value {
            Some(text) if text.len() > self.max => Err(LimitError::TooLong {
                field: format!("{prefix}{}", self.field),
                len: text.len(),
                max: self.max,
                why: self.why,
            }),
            _ => Ok(()),
        }
    }
}

/// Checks every size of a training configuration. `prefix` names where the configuration
/// sits in the tool's input (`"config."`, `"before."`, or `""`).
pub fn check_config(cfg: &TrainingConfig, prefix: &str) -> Result<(), LimitError> {
    let int = |v: Option<u32>| v.map(u64::from);
    NUM_GPUS.check(prefix, int(cfg.num_gpus))?;
    SEQ_LENGTH.check(prefix, cfg.seq_length)?;
    MICRO_BATCH_SIZE.check(prefix, int(cfg.micro_batch_size))?;
    GLOBAL_BATCH_SIZE.check(prefix, int(cfg.global_batch_size))?;
    TENSOR_PARALLEL.check(prefix, int(cfg.tensor_model_parallel_size))?;
    PIPELINE_PARALLEL.check(prefix, int(cfg.pipeline_model_parallel_size))?;
    VIRTUAL_PIPELINE_PARALLEL.check(prefix, int(cfg.virtual_pipeline_model_parallel_size))?;
    CONTEXT_PARALLEL.check(prefix, int(cfg.context_parallel_size))?;
    for &size in cfg.hierarchical_context_parallel_sizes.iter().flatten() {
        HIERARCHICAL_CP_SIZE.check(prefix, Some(u64::from(size)))?;
    }
    EXPERT_PARALLEL.check(prefix, int(cfg.expert_model_parallel_size))?;
    EXPERT_TENSOR_PARALLEL.check(prefix, int(cfg.expert_tensor_parallel_size))?;
    RECOMPUTE_NUM_LAYERS.check(prefix, int(cfg.recompute_num_layers))?;
    FIRST_STAGE_LAYERS.check(prefix, int(cfg.num_layers_in_first_pipeline_stage))?;
    LAST_STAGE_LAYERS.check(prefix, int(cfg.num_layers_in_last_pipeline_stage))?;
    MTP_LAYERS.check(prefix, int(cfg.mtp_num_layers))?;
    EP_OVERLAP_CHUNKS.check(prefix, int(cfg.moe_ep_overlap_chunks))?;
    FLEX_DISPATCHER_SMS.check(prefix, int(cfg.moe_flex_dispatcher_num_sms))?;
    DEEPEP_SMS.check(prefix, int(cfg.moe_deepep_num_sms))?;
    HYBRIDEP_SMS.check(prefix, int(cfg.moe_hybridep_num_sms))?;
    EXPERT_CAPACITY_FACTOR.check_f64(prefix, cfg.moe_expert_capacity_factor)?;
    RANK_CAPACITY_FACTOR.check_f64(prefix, cfg.moe_expert_rank_capacity_factor)?;
    OFFLOAD_FRACTION.check_f64(prefix, cfg.optimizer_offload_fraction)?;
    ACTIVATION_OFFLOAD_FRACTION.check_f64(prefix, cfg.activation_offload_fraction)?;
    CPU_OFFLOADING_LAYERS.check(prefix, int(cfg.cpu_offloading_num_layers))?;
    ATTENTION_DROPOUT.check_f64(prefix, cfg.attention_dropout)?;
    if let Some(env) = &cfg.attention_env {
        for (_, value) in env.set() {
            ENV_VALUE.check(prefix, Some(value))?;
        }
    }
    DDP_BUCKET_SIZE.check(prefix, cfg.ddp_bucket_size)?;
    DDP_NUM_BUCKETS.check(prefix, int(cfg.ddp_num_buckets))?;
    OPTIMIZER_INSTANCES.check(prefix, int(cfg.num_distributed_optimizer_instances))?;
    HARDWARE_ID.check(prefix, cfg.hardware.as_deref())?;
    PIPELINE_LAYOUT.check(prefix, cfg.pipeline_model_parallel_layout.as_deref())?;
    if let Some(super::config::ModelSpec::Id(id)) = &cfg.model {
        MODEL_ID.check(prefix, Some(id))?;
    }
    Ok(())
}

// ---- architectures (HuggingFace config.json objects and model cards) ----

/// Hidden sizes: the widest published decoders are about 2^14 wide.
pub const HIDDEN_SIZE: Limit = limit(
    "hidden_size",
    1.0,
    1_048_576.0,
    "published decoders are at most about 2^14 wide",
);
/// Vocabularies: the largest published tokenizers have a few hundred thousand entries.
pub const VOCAB_SIZE: Limit = limit(
    "vocab_size",
    1.0,
    16_777_216.0,
    "published tokenizers have under 2^19 entries",
);
/// Heads, head dimensions and low-rank widths.
pub const HEADS: Limit = limit(
    "num_attention_heads",
    1.0,
    16_384.0,
    "published models use at most a few hundred heads",
);
pub const HEAD_DIM: Limit = limit(
    "head_dim",
    0.0,
    65_536.0,
    "attention head widths are at most a few hundred",
);
/// FFN widths (dense, expert and shared): the widest published is about 2^16.
pub const FFN_HIDDEN_SIZE: Limit = limit(
    "ffn_hidden_size",
    0.0,
    4_194_304.0,
    "published FFN widths are under 2^17",
);
pub const NUM_EXPERTS: Limit = limit(
    "num_experts",
    0.0,
    65_536.0,
    "published MoE models have at most a few thousand experts",
);
pub const SLIDING_WINDOW: Limit = limit(
    "sliding_window",
    0.0,
    33_554_432.0,
    "a window cannot exceed the longest sequence",
);

/// Checks the dimensions of an architecture, so that every product the model forms from them
/// fits in a `u64`.
pub fn check_architecture(arch: &Architecture) -> Result<(), LimitError> {
    LAYERS.check("", Some(u64::from(arch.num_layers)))?;
    HIDDEN_SIZE.check("", Some(arch.hidden_size))?;
    VOCAB_SIZE.check("", Some(arch.vocab_size))?;
    HEADS.check("", Some(arch.num_attention_heads))?;
    named(HEADS, "num_query_groups").check("", arch.num_query_groups)?;
    HEAD_DIM.check("", arch.head_dim)?;
    FFN_HIDDEN_SIZE.check("", Some(arch.ffn_hidden_size))?;
    SLIDING_WINDOW.check("", arch.sliding_window)?;
    counted(LAYERS, "attention_pattern length")
        .check("", Some(arch.attention_pattern.len() as u64))?;
    MTP_LAYERS.check("", Some(u64::from(arch.mtp_num_layers)))?;
    if let Some(m) = &arch.moe {
        NUM_EXPERTS.check("moe.", Some(m.num_experts))?;
        named(NUM_EXPERTS, "top_k").check("moe.", Some(m.top_k))?;
        named(FFN_HIDDEN_SIZE, "moe_ffn_hidden_size").check("moe.", Some(m.moe_ffn_hidden_size))?;
        named(FFN_HIDDEN_SIZE, "shared_expert_ffn_hidden_size")
            .check("moe.", Some(m.shared_expert_ffn_hidden_size))?;
        counted(LAYERS, "first_k_dense_layers")
            .check("moe.", Some(u64::from(m.first_k_dense_layers)))?;
    }
    if let Some(m) = &arch.mla {
        for (field, value) in [
            ("q_lora_rank", m.q_lora_rank.unwrap_or(0)),
            ("kv_lora_rank", m.kv_lora_rank),
            ("qk_head_dim", m.qk_head_dim),
            ("qk_pos_emb_head_dim", m.qk_pos_emb_head_dim),
            ("v_head_dim", m.v_head_dim),
        ] {
            named(HEAD_DIM, field).check("mla.", Some(value))?;
        }
    }
    if let Some(g) = &arch.linear_attention {
        for (field, value) in [
            ("num_key_heads", g.num_key_heads),
            ("num_value_heads", g.num_value_heads),
        ] {
            named(HEADS, field).check("linear_attention.", Some(value))?;
        }
        for (field, value) in [
            ("key_head_dim", g.key_head_dim),
            ("value_head_dim", g.value_head_dim),
            ("conv_kernel_dim", g.conv_kernel_dim),
        ] {
            named(HEAD_DIM, field).check("linear_attention.", Some(value))?;
        }
    }
    Ok(())
}

/// The same bound under another field name.
const fn named(base: Limit, field: &'static str) -> Limit {
    Limit { field, ..base }
}

/// The same upper bound for a count that may be zero.
const fn counted(base: Limit, field: &'static str) -> Limit {
    Limit {
        field,
        min: 0.0,
        ..base
    }
}

/// Schema transform: states the limits of the table above as `minimum`/`maximum` (numbers)
/// and `maxLength` (strings) on the properties of an input type. Apply it with
/// `#[schemars(transform = crate::model::limits::schema_limits)]`.
pub fn schema_limits(schema: &mut Schema) {
    let Some(Value::Object(properties)) = schema.get_mut("properties") else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        let Value::Object(property) = property else {
            continue;
        };
        if let Some((_, limit)) = NUMERIC.iter().find(|(field, _)| field == name) {
            property.insert("minimum".into(), number(limit.min));
            property.insert("maximum".into(), number(limit.max));
            append_description(property, limit.why);
        } else if let Some(limit) = STRINGS.iter().find(|l| l.field == name) {
            property.insert("maxLength".into(), Value::from(limit.max));
        }
    }
}

/// Integral bounds as JSON integers (schema validators of integer fields expect them).
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        Value::from(value as i64)
    } else {
        Value::from(value)
    }
}

fn append_description(property: &mut Map<String, Value>, why: &str) {
    let text = match property.get("description").and_then(Value::as_str) {
        Some(existing) => format!("{existing} ({why})"),
        None => format!("Limit: {why}."),
    };
    property.insert("description".into(), Value::String(text));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_keep_layout_products_inside_u32_and_u64() {
        // The model forms TP·CP·PP and ETP·EP·PP in u32 (saturating) and DP·MBS in u32.
        let tp_cp_pp = TENSOR_PARALLEL.max * CONTEXT_PARALLEL.max * PIPELINE_PARALLEL.max;
        assert!(tp_cp_pp < u64::MAX as f64);
        assert!(NUM_GPUS.max * MICRO_BATCH_SIZE.max < f64::from(u32::MAX));
        assert!(GLOBAL_BATCH_SIZE.max + NUM_GPUS.max * MICRO_BATCH_SIZE.max < f64::from(u32::MAX));
        assert!(HIDDEN_SIZE.max * VOCAB_SIZE.max < u64::MAX as f64);
        assert!(SEQ_LENGTH.max * MICRO_BATCH_SIZE.max * HIDDEN_SIZE.max < u64::MAX as f64);
    }

    #[test]
    fn out_of_range_names_field_range_and_reason() {
        let cfg = TrainingConfig {
            num_gpus: Some(1 << 31),
            ..TrainingConfig::default()
        };
        let message = check_config(&cfg, "config.").unwrap_err().to_string();
        assert!(message.contains("`config.num_gpus`"), "{message}");
        assert!(message.contains("1..=1048576"), "{message}");
        assert!(message.contains("largest training cluster"), "{message}");
        let zero = TrainingConfig {
            micro_batch_size: Some(0),
            ..TrainingConfig::default()
        };
        assert!(check_config(&zero, "").is_err());
        assert!(check_config(&TrainingConfig::default(), "").is_ok());
    }

    #[test]
    fn floats_refuse_nan_and_infinity() {
        assert!(MEMORY_BUDGET_GIB.check_f64("", Some(f64::NAN)).is_err());
        assert!(MEMORY_BUDGET_GIB
            .check_f64("", Some(f64::INFINITY))
            .is_err());
        assert!(MEMORY_BUDGET_GIB.check_f64("", Some(-1.0)).is_err());
        assert!(MEMORY_BUDGET_GIB.check_f64("", Some(72.0)).is_ok());
    }

    #[test]
    fn schema_states_the_limits() {
        let mut schema = schemars::json_schema!({
            "type": "object",
            "properties": {
                "num_gpus": {"type": "integer", "minimum": 0},
                "query": {"type": "string"},
                "other": {"type": "integer"}
            }
        });
        schema_limits(&mut schema);
        let value = schema.as_value();
        assert_eq!(value["properties"]["num_gpus"]["minimum"], 1);
        assert_eq!(value["properties"]["num_gpus"]["maximum"], 1_048_576);
        assert_eq!(value["properties"]["query"]["maxLength"], 1024);
        assert!(value["properties"]["other"].get("maximum").is_none());
    }
}
