//! Megatron-LM / Megatron-Bridge training logs: the argument dump (`---- arguments ----` …
//! `name ..... value` … `end of arguments`), iteration lines (`elapsed time per iteration (ms)`,
//! `throughput per GPU (TFLOP/s/GPU)`), memory reports (`[Rank N] (after K iterations) memory
//! (MB) | allocated … | max allocated … | reserved … | max reserved …`) and PyTorch's
//! out-of-memory message, under launcher prefixes (`[default3]:`, `0: `, timestamps) and with
//! ranks interleaved. Formats: `megatron/training/arguments.py:_print_args`,
//! `training.py:training_log` and `utils/common_utils.py:report_memory` (Megatron-LM d98e8a64).
//!
//! The argument dump becomes a command line for the Megatron-LM reader, so each argument is
//! classified exactly as a flag would be (modelled, architecture, known but unused).

use serde::Serialize;

use super::argument_dump::read_argument_dump;
use super::megatron_args::defaults::{megatron_default, MEGATRON_DEFAULTS_OVER_RECIPES};
use crate::model::config::{AssumedDefault, ConfigError, ModelSpec, TrainingConfig};

/// Largest log read (real logs of long runs are tens of MiB; only their text lines matter).
const MAX_LOG_BYTES: usize = 256 * 1024 * 1024;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LogError {
    #[error("the log is {bytes} bytes; logs over {limit} bytes are refused (pass the part with the argument dump and the iterations)")]
    TooLarge { bytes: usize, limit: usize },
    #[error("no Megatron log line found (looked for the `arguments` dump, `elapsed time per iteration (ms)`, Bridge's `Step Time :`, `memory (MB) | allocated` and `CUDA out of memory`); first line: `{first_line}`")]
    NothingFound { first_line: String },
    #[error("the argument dump could not be read: {0}")]
    Arguments(ConfigError),
}

/// One `iteration N/M | ... | elapsed time per iteration (ms): X | ...` line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterationLine {
    pub iteration: u64,
    pub elapsed_ms: f64,
    /// `throughput per GPU (TFLOP/s/GPU)` (`--log-throughput`), or the newer
    /// `compute per GPU (TFLOP/s/GPU)` when the line has no wall-clock figure.
    pub tflops_per_gpu: Option<f64>,
    /// `tokens/s/GPU inst/harmonic mean: A/B` (A) or `tokens per GPU (tokens/s/GPU): A`.
    pub tokens_per_s_per_gpu: Option<f64>,
}

/// One `report_memory` line, in MiB as printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryReport {
    pub rank: u32,
    /// What the line says it follows (`(after 10 iterations)`).
    pub when: String,
    pub allocated_mib: f64,
    pub max_allocated_mib: f64,
    pub reserved_mib: f64,
    pub max_reserved_mib: f64,
}

/// PyTorch's `CUDA out of memory` message, in GiB.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutOfMemory {
    /// The rank the launcher prefix names, if any.
    pub rank: Option<u32>,
    pub tried_to_allocate_gib: Option<f64>,
    pub total_capacity_gib: Option<f64>,
    pub free_gib: Option<f64>,
    pub allocated_by_pytorch_gib: Option<f64>,
    pub reserved_unallocated_gib: Option<f64>,
}

/// Steady-state step statistics (warm-up iterations skipped).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct StepStatistics {
    pub iterations_used: usize,
    pub warmup_skipped: usize,
    pub median_step_ms: f64,
    pub median_tflops_per_gpu: Option<f64>,
    pub median_tokens_per_s_per_gpu: Option<f64>,
}

/// Everything usable a log holds.
#[derive(Debug, Default)]
pub struct MegatronLog {
    /// The configuration from the argument dump, when the log has one.
    pub config: Option<TrainingConfig>,
    pub iterations: Vec<IterationLine>,
    pub memory: Vec<MemoryReport>,
    pub out_of_memory: Option<OutOfMemory>,
}

impl MegatronLog {
    /// Median step time and throughput, skipping warm-up: the first 10% of the iteration
    /// lines and at least the first two (compilation, allocator growth, CUDA-graph capture).
    pub fn step_statistics(&self) -> Option<StepStatistics> {
        let skip = (self.iterations.len() / 10)
            .max(2)
            .min(self.iterations.len().saturating_sub(1));
        let steady = &self.iterations[skip..];
        if steady.is_empty() {
            return None;
        }
        let median = |mut values: Vec<f64>| -> Option<f64> {
            if values.is_empty() {
                return None;
            }
            values.sort_by(f64::total_cmp);
            Some(values[values.len() / 2])
        };
        Some(StepStatistics {
            iterations_used: steady.len(),
            warmup_skipped: skip,
            median_step_ms: median(steady.iter().map(|i| i.elapsed_ms).collect())?,
            median_tflops_per_gpu: median(steady.iter().filter_map(|i| i.tflops_per_gpu).collect()),
            median_tokens_per_s_per_gpu: median(
                steady
                    .iter()
                    .filter_map(|i| i.tokens_per_s_per_gpu)
                    .collect(),
            ),
        })
    }

    /// The largest `max allocated` / `max reserved` each rank reported, by rank.
    pub fn peak_memory_by_rank(&self) -> Vec<MemoryReport> {
        let mut out: Vec<MemoryReport> = Vec::new();
        for report in &self.memory {
            match out.iter_mut().find(|r| r.rank == report.rank) {
                Some(existing) if report.max_reserved_mib > existing.max_reserved_mib => {
                    *existing = report.clone()
                }
                Some(_) => {}
                None => out.push(report.clone()),
            }
        }
        out.sort_by_key(|r| r.rank);
        out
    }
}

/// Strips launcher prefixes: `[default3]:`, Slurm's `0: `, a leading timestamp in brackets.
/// Returns the rank a prefix names, if any.
fn strip_prefixes(line: &str) -> (Option<u32>, &str) {
    let mut rest = line.trim_start();
    let mut rank = None;
    loop {
        if let Some(after) = rest.strip_prefix('[') {
            if let Some((inside, tail)) = after.split_once(']') {
                let digits: String = inside.chars().filter(char::is_ascii_digit).collect();
                let is_launcher = inside.starts_with("default") || inside.starts_with("rank");
                let is_time =
                    inside.len() >= 10 && inside.chars().take(4).all(|c| c.is_ascii_digit());
                if is_launcher || is_time {
                    if is_launcher {
                        rank = digits.parse().ok();
                    }
                    rest = tail.trim_start_matches(':').trim_start();
                    continue;
                }
            }
        }
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !digits.is_empty() {
            if let Some(tail) = rest[digits.len()..].strip_prefix(": ") {
                rank = digits.parse().ok();
                rest = tail;
                continue;
            }
        }
        return (rank, rest);
    }
}

/// The number after `label` in `text` (up to the next space or `|`).
fn number_after(text: &str, label: &str) -> Option<f64> {
    let start = text.find(label)? + label.len();
    let value: String = text[start..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-' || *c == 'e' || *c == '+')
        .collect();
    value.parse().ok()
}

/// `X GiB` / `X MiB` after `label`, in GiB.
fn size_after(text: &str, label: &str) -> Option<f64> {
    let start = text.find(label)? + label.len();
    let tail = text[start..].trim_start();
    let value = number_after(tail, "")?;
    let unit_at = tail.find(|c: char| c.is_ascii_alphabetic())?;
    let scale = match tail.get(unit_at..unit_at + 3)? {
        "GiB" => 1.0,
        "MiB" => 1.0 / 1024.0,
        "KiB" => 1.0 / (1024.0 * 1024.0),
        "TiB" => 1024.0,
        _ => return None,
    };
    Some(value * scale)
}

/// Megatron-LM's `training_log` line (megatron/training/training.py at d98e8a64; the same in
/// Megatron-Bridge's train_utils.py at 067f987d), and the newer form some containers print
/// (`compute per GPU (TFLOP/s/GPU): X (avg Y) | tokens/s/GPU inst/harmonic mean: A/B`). Where a
/// line has both `throughput per GPU` (wall clock) and `compute per GPU`, the wall-clock
/// figure is the one the step time matches.
fn iteration_line(text: &str) -> Option<IterationLine> {
    let elapsed_ms = number_after(text, "elapsed time per iteration (ms):")?;
    let iteration = number_after(text, "iteration")? as u64;
    Some(IterationLine {
        iteration,
        elapsed_ms,
        tflops_per_gpu: number_after(text, "throughput per GPU (TFLOP/s/GPU):")
            .or_else(|| number_after(text, "compute per GPU (TFLOP/s/GPU):")),
        tokens_per_s_per_gpu: number_after(text, "tokens/s/GPU inst/harmonic mean:")
            .or_else(|| number_after(text, "tokens per GPU (tokens/s/GPU):")),
    })
}

/// Megatron-Bridge's performance line, `Step Time : 0.79s GPU utilization: 62.4MODEL_TFLOP/s/GPU`
/// (src/megatron/bridge/training/utils/train_utils.py at 067f987d); it carries no iteration
/// number, so `index` numbers it.
fn bridge_step_line(text: &str, index: u64) -> Option<IterationLine> {
    let seconds = number_after(text, "Step Time :")?;
    Some(IterationLine {
        iteration: index,
        elapsed_ms: seconds * 1000.0,
        tflops_per_gpu: number_after(text, "GPU utilization:"),
        tokens_per_s_per_gpu: None,
    })
}

fn memory_line(text: &str) -> Option<MemoryReport> {
    let after_rank = text.split_once("[Rank ")?.1;
    let (rank, rest) = after_rank.split_once(']')?;
    let when = rest.split(" memory (MB)").next()?.trim().to_string();
    Some(MemoryReport {
        rank: rank.trim().parse().ok()?,
        when,
        allocated_mib: number_after(rest, "| allocated:")?,
        max_allocated_mib: number_after(rest, "| max allocated:")?,
        reserved_mib: number_after(rest, "| reserved:")?,
        max_reserved_mib: number_after(rest, "| max reserved:")?,
    })
}

fn out_of_memory_line(rank: Option<u32>, text: &str) -> Option<OutOfMemory> {
    if !text.contains("CUDA out of memory") {
        return None;
    }
    Some(OutOfMemory {
        rank,
        tried_to_allocate_gib: size_after(text, "Tried to allocate"),
        total_capacity_gib: size_after(text, "total capacity of"),
        free_gib: size_after(text, "of which"),
        allocated_by_pytorch_gib: size_after(text, "memory in use. Of the allocated memory")
            .or_else(|| size_after(text, "Of the allocated memory")),
        reserved_unallocated_gib: text
            .find("is allocated by PyTorch, and")
            .and_then(|at| size_after(&text[at..], "is allocated by PyTorch, and")),
    })
}

/// Reads a log. `model` names the model when the dump's architecture should not be used
/// (or to compare against a card); without it the architecture comes from the dump.
pub fn read_megatron_log(text: &str, model: Option<&ModelSpec>) -> Result<MegatronLog, LogError> {
    if text.len() > MAX_LOG_BYTES {
        return Err(LogError::TooLarge {
            bytes: text.len(),
            limit: MAX_LOG_BYTES,
        });
    }
    let mut log = MegatronLog::default();
    let mut dump: Option<Vec<(String, String)>> = None;
    let mut in_dump = false;
    // The tokenizer's padded vocabulary: printed after the dump, which has no vocabulary size
    // when a tokenizer library supplies it (megatron/core/tokenizers/utils/build_tokenizer.py).
    let mut padded_vocab: Option<u64> = None;
    // Bridge's `Step Time :` lines, used when the log has no `training_log` lines (Bridge
    // prints both when both are on; counting both would count each step twice).
    let mut bridge_steps: Vec<IterationLine> = Vec::new();
    // Megatron-Bridge's configuration summary (`ConfigContainer.log_non_default_values`):
    // `[section]` headers and `  field: value` lines, read into a Bridge override tree.
    let mut bridge_summary: Option<serde_json::Map<String, serde_json::Value>> = None;
    let mut summary_section: Option<String> = None;
    let mut in_summary = false;
    for raw in text.lines() {
        let (rank, line) = strip_prefixes(raw);
        if line.contains("Configuration Summary (Non-Default Values vs Megatron Core)") {
            in_summary = true;
            bridge_summary = Some(serde_json::Map::new());
            continue;
        }
        if in_summary {
            let trimmed = line.trim();
            if let Some(header) = trimmed.strip_prefix('[') {
                summary_section = header.split(']').next().map(str::to_owned);
            } else if trimmed.starts_with("=====") && summary_section.is_some() {
                in_summary = false;
            } else if let (Some(section), Some((field, value))) =
                (&summary_section, trimmed.split_once(": "))
            {
                // `value  (Mcore default: x)` for Megatron-Core configs.
                let value = value.split("  (Mcore default:").next().unwrap_or(value);
                let parsed = python_repr(value.trim());
                if !parsed.is_null() && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    if let Some(tree) = bridge_summary.as_mut() {
                        if let serde_json::Value::Object(fields) = tree
                            .entry(section.clone())
                            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()))
                        {
                            fields.insert(field.to_owned(), parsed);
                        }
                    }
                }
            }
            continue;
        }
        if line.contains("------------------------ arguments ------------------------") {
            in_dump = true;
            dump = Some(Vec::new());
            continue;
        }
        if in_dump {
            if line.contains("end of arguments") {
                in_dump = false;
                continue;
            }
            if let Some((name, value)) = dump_entry(line) {
                if let Some(entries) = dump.as_mut() {
                    entries.push((name, value));
                }
            }
            continue;
        }
        if line.contains("> padded vocab (size:") {
            padded_vocab = number_after(line, "new size:").map(|v| v as u64);
            continue;
        }
        if let Some(iteration) = iteration_line(line) {
            log.iterations.push(iteration);
        } else if let Some(step) = bridge_step_line(line, bridge_steps.len() as u64 + 1) {
            bridge_steps.push(step);
        } else if let Some(report) = memory_line(line) {
            log.memory.push(report);
        } else if let Some(oom) = out_of_memory_line(rank, line) {
            log.out_of_memory.get_or_insert(oom);
        }
    }
    if log.iterations.is_empty() {
        log.iterations = bridge_steps;
    }
    if let Some(mut entries) = dump {
        let has_vocab = entries.iter().any(|(name, value)| {
            (name == "padded_vocab_size" || name == "vocab_size") && value.parse::<u64>().is_ok()
        });
        if let (false, Some(vocab)) = (has_vocab, padded_vocab) {
            entries.retain(|(name, _)| name != "padded_vocab_size");
            entries.push(("padded_vocab_size".into(), vocab.to_string()));
        }
        log.config = Some(read_argument_dump(&entries, model).map_err(LogError::Arguments)?);
    } else if let Some(mut tree) = bridge_summary.filter(|t| !t.is_empty()) {
        let assumed =
            fill_mcore_defaults(&mut tree, model.is_some()).map_err(LogError::Arguments)?;
        let mut config = super::overrides::read_value(&serde_json::Value::Object(tree))
            .map_err(LogError::Arguments)?;
        config.assumed_defaults.extend(assumed);
        if let Some(model) = model {
            config.model = Some(model.clone());
        }
        log.config = Some(config);
    }
    if log.config.is_none()
        && log.iterations.is_empty()
        && log.memory.is_empty()
        && log.out_of_memory.is_none()
    {
        return Err(LogError::NothingFound {
            first_line: text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(120)
                .collect(),
        });
    }
    Ok(log)
}

/// Megatron-Bridge's summary lists only the optimizer, DDP and model values that differ from
/// Megatron Core's defaults, so a field it does not list is at that default. Where the cost
/// model's own default differs (it follows the recipes), the summary's tree gets Megatron Core's
/// value, and the answer says so. `model_named` says the model is named apart from the log.
fn fill_mcore_defaults(
    tree: &mut serde_json::Map<String, serde_json::Value>,
    model_named: bool,
) -> Result<Vec<AssumedDefault>, ConfigError> {
    let listed = |tree: &serde_json::Map<String, serde_json::Value>, field: &str| {
        ["optimizer", "ddp", "model"].iter().any(|section| {
            tree.get(*section)
                .and_then(|s| s.get(field))
                .is_some_and(|v| !v.is_null())
        })
    };
    let moe = model_named || listed(tree, "num_moe_experts");
    let fsdp = tree
        .get("ddp")
        .and_then(|s| s.get("use_megatron_fsdp"))
        .and_then(serde_json::Value::as_bool)
        == Some(true);
    let mut assumed = Vec::new();
    for entry in MEGATRON_DEFAULTS_OVER_RECIPES {
        if listed(tree, entry.dest)
            || (entry.moe_only && !moe)
            || (entry.dest == "use_distributed_optimizer" && fsdp)
        {
            continue;
        }
        let Some((_, default)) = megatron_default(entry.dest)? else {
            continue;
        };
        if let serde_json::Value::Object(fields) = tree
            .entry(entry.section.to_string())
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()))
        {
            fields.insert(entry.dest.to_string(), default.clone());
        }
        assumed.push(AssumedDefault::new(
            entry.dest,
            default,
            format!(
                "Megatron Core's default: the configuration summary lists only values that differ from it: {}",
                entry.effect
            ),
        ));
    }
    Ok(assumed)
}

/// `  name ........ value` (48 columns of name and dots).
fn dump_entry(line: &str) -> Option<(String, String)> {
    let (name, rest) = line.trim().split_once(' ')?;
    let rest = rest.trim_start();
    let dots = rest.chars().take_while(|c| *c == '.').count();
    if dots < 2 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    Some((name.to_string(), rest[dots..].trim().to_string()))
}

/// A Python `repr` as printed by Bridge's summary: `True`, `None`, `3`, `'x'`, `['a', 'b']`,
/// `<AttnBackend.auto: 5>` (the member name), anything else as its text.
fn python_repr(value: &str) -> serde_json::Value {
    use serde_json::Value;
    let value = value.trim();
    match value {
        "True" => return Value::Bool(true),
        "False" => return Value::Bool(false),
        "None" => return Value::Null,
        _ => {}
    }
    if let Ok(integer) = value.parse::<i64>() {
        return Value::from(integer);
    }
    if let Ok(number) = value.parse::<f64>() {
        return Value::from(number);
    }
    if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        return Value::Array(
            inner
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(python_repr)
                .collect(),
        );
    }
    if let Some(member) = value.strip_prefix('<').and_then(|v| v.split(':').next()) {
        if let Some((_, name)) = member.split_once('.') {
            return Value::String(name.to_owned());
        }
    }
    Value::String(value.trim_matches(['\'', '"']).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
[default0]:------------------------ arguments ------------------------
[default0]:  context_parallel_size ........................... 4
[default0]:  expert_model_parallel_size ...................... 8
[default0]:  hidden_size ..................................... 2048
[default0]:  micro_batch_size ................................ 1
[default0]:  recompute_granularity ........................... selective
[default0]:  recompute_modules ............................... ['moe_act', 'layernorm']
[default0]:  sequence_parallel ............................... True
[default0]:  lr .............................................. 0.0003
[default0]:  world_size ...................................... 64
[default0]:  data_parallel_size .............................. 2
[default0]:  tensor_model_parallel_size ...................... 2
[default0]:-------------------- end of arguments ---------------------
[default7]: [2026-11-02 10:00:01.123456] iteration        1/     100 | consumed samples:          128 | elapsed time per iteration (ms): 91234.5 | throughput per GPU (TFLOP/s/GPU): 12.0 |
[default7]: [2026-11-02 10:00:09.123456] iteration        2/     100 | consumed samples:          256 | elapsed time per iteration (ms): 8100.0 | throughput per GPU (TFLOP/s/GPU): 301.5 |
[default7]: [2026-11-02 10:00:17.123456] iteration        3/     100 | consumed samples:          384 | elapsed time per iteration (ms): 8000.0 | throughput per GPU (TFLOP/s/GPU): 305.2 |
[default7]: [2026-11-02 10:00:25.123456] iteration        4/     100 | consumed samples:          512 | elapsed time per iteration (ms): 8050.0 | throughput per GPU (TFLOP/s/GPU): 303.0 |
0: [Rank 0] (after 4 iterations) memory (MB) | allocated: 30000.00 | max allocated: 61440.00 | reserved: 65000.00 | max reserved: 70000.00
3: [Rank 32] (after 4 iterations) memory (MB) | allocated: 20000.00 | max allocated: 40960.00 | reserved: 45000.00 | max reserved: 46000.00
";

    #[test]
    fn reads_dump_iterations_and_memory_under_prefixes() {
        let log = read_megatron_log(LOG, Some(&ModelSpec::Id("qwen3-30b-a3b".into()))).unwrap();
        let config = log.config.as_ref().unwrap();
        assert_eq!((config.tp(), config.cp(), config.ep()), (2, 4, 8));
        assert_eq!(config.num_gpus, Some(64));
        let modules: Vec<&str> = config
            .recompute_modules()
            .iter()
            .map(|m| m.name())
            .collect();
        assert_eq!(modules, ["moe_act", "layernorm"]);
        assert!(
            config
                .ignored_settings
                .iter()
                .any(|i| i.key.starts_with("--lr") || i.key.starts_with("lr")),
            "{:?}",
            config.ignored_settings
        );
        assert_eq!(log.iterations.len(), 4);
        let stats = log.step_statistics().unwrap();
        assert_eq!(stats.warmup_skipped, 2);
        assert_eq!(stats.median_step_ms, 8050.0);
        let peaks = log.peak_memory_by_rank();
        assert_eq!(peaks.len(), 2);
        assert_eq!(peaks[0].max_allocated_mib, 61440.0);
        assert_eq!(peaks[1].rank, 32);
    }

    #[test]
    fn a_switch_the_dump_prints_false_is_off() {
        let text = "\
------------------------ arguments ------------------------
  num_experts ..................................... 128
  overlap_grad_reduce ............................. False
  use_distributed_optimizer ....................... False
  tensor_model_parallel_size ...................... 2
-------------------- end of arguments ---------------------
";
        let log = read_megatron_log(text, Some(&ModelSpec::Id("qwen3-30b-a3b".into()))).unwrap();
        let config = log.config.unwrap();
        assert_eq!(config.use_distributed_optimizer, Some(false));
        assert_eq!(config.overlap_grad_reduce, Some(false));
        // Not printed (an abridged dump): left to the cost model's assumption.
        assert_eq!(config.overlap_param_gather, None);
    }

    #[test]
    fn reads_pytorch_out_of_memory_with_its_rank() {
        let text = "[default5]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 5 has a total capacity of 79.10 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.88 GiB memory in use. Of the allocated memory 70.25 GiB is allocated by PyTorch, and 5.10 GiB is reserved by PyTorch but unallocated.";
        let log = read_megatron_log(text, None).unwrap();
        let oom = log.out_of_memory.unwrap();
        assert_eq!(oom.rank, Some(5));
        assert_eq!(oom.tried_to_allocate_gib, Some(3.5));
        assert_eq!(oom.total_capacity_gib, Some(79.1));
        assert_eq!(oom.free_gib, Some(1.2));
        assert_eq!(oom.allocated_by_pytorch_gib, Some(70.25));
        assert_eq!(oom.reserved_unallocated_gib, Some(5.1));
    }

    #[test]
    fn a_file_without_log_lines_is_an_error_naming_it() {
        let err = read_megatron_log("hello\nworld\n", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`hello`"), "{err}");
    }

    /// The newer iteration form: `compute per GPU` with a running average and tokens/s/GPU.
    #[test]
    fn reads_the_newer_compute_and_tokens_form() {
        let text = "\
 [2026-10-01 10:00:01] iteration        1/     200 | elapsed time per iteration (ms): 900.0 | compute per GPU (TFLOP/s/GPU): 100.0 (avg 100.0) | tokens/s/GPU inst/harmonic mean: 1000.0/1000.0 | global batch size: 32
 [2026-10-01 10:00:02] iteration        2/     200 | elapsed time per iteration (ms): 300.0 | compute per GPU (TFLOP/s/GPU): 490.0 (avg 300.0) | tokens/s/GPU inst/harmonic mean: 9500.0/5000.0 | global batch size: 32
 [2026-10-01 10:00:03] iteration        3/     200 | elapsed time per iteration (ms): 100.0 | compute per GPU (TFLOP/s/GPU): 496.3 (avg 496.1) | tokens/s/GPU inst/harmonic mean: 9640.7/9629.8 | global batch size: 32
";
        let log = read_megatron_log(text, None).unwrap();
        let stats = log.step_statistics().unwrap();
        assert_eq!(stats.median_step_ms, 100.0);
        assert_eq!(stats.median_tflops_per_gpu, Some(496.3));
        assert_eq!(stats.median_tokens_per_s_per_gpu, Some(9640.7));
        // Both figures on one line: the wall-clock throughput is the one the step matches.
        let both = "iteration 5/9 | elapsed time per iteration (ms): 10.0 | compute per GPU (TFLOP/s/GPU): 900.0 | throughput per GPU (TFLOP/s/GPU): 300.0 | tokens per GPU (tokens/s/GPU): 77.0 |";
        let line = iteration_line(both).unwrap();
        assert_eq!(
            (line.tflops_per_gpu, line.tokens_per_s_per_gpu),
            (Some(300.0), Some(77.0))
        );
    }

    /// Megatron-Bridge's `Step Time :` lines count only when the log has no `training_log`
    /// lines (Bridge prints both when both are on).
    #[test]
    fn reads_bridge_step_time_lines_without_double_counting() {
        let only_bridge = "\
[default0]:Step Time : 4.00s GPU utilization: 50.0MODEL_TFLOP/s/GPU
[default0]:Step Time : 0.80s GPU utilization: 61.0MODEL_TFLOP/s/GPU
[default0]:Step Time : 0.79s GPU utilization: 62.4MODEL_TFLOP/s/GPU
[default0]:Step Time : 0.81s GPU utilization: 61.9MODEL_TFLOP/s/GPU
";
        let log = read_megatron_log(only_bridge, None).unwrap();
        assert_eq!(log.iterations.len(), 4);
        let stats = log.step_statistics().unwrap();
        assert_eq!(stats.warmup_skipped, 2);
        assert_eq!(stats.median_step_ms, 810.0);
        assert_eq!(stats.median_tflops_per_gpu, Some(62.4));
        let both = format!(
            "{only_bridge} [2026-09-16 15:26:10] iteration 1/10 | elapsed time per iteration (ms): 790.0 | throughput per GPU (TFLOP/s/GPU): 62.4 |\n"
        );
        assert_eq!(read_megatron_log(&both, None).unwrap().iterations.len(), 1);
    }

    /// A file cut off inside the argument dump, and one cut in the middle of an iteration line:
    /// what was read is kept, the half line is not taken for a measurement.
    #[test]
    fn truncated_files_keep_what_was_read() {
        let cut_in_dump = "\
[default0]:------------------------ arguments ------------------------
[default0]:  context_parallel_size ........................... 2
[default0]:  seq_length ...................................... 32768
[default0]:  tensor_model_parallel_s";
        let log =
            read_megatron_log(cut_in_dump, Some(&ModelSpec::Id("qwen3-30b-a3b".into()))).unwrap();
        let config = log.config.unwrap();
        assert_eq!((config.cp(), config.seq_length), (2, Some(32768)));
        let cut_in_line = "\
iteration 1/9 | elapsed time per iteration (ms): 5000.0 |
iteration 2/9 | elapsed time per iteration (ms): 1000.0 |
iteration 3/9 | elapsed time per iteration (ms): 1010.0 |
iteration 4/9 | elapsed time per iteration (ms): 1020.0 |
iteration 5/9 | elapsed time per iter";
        let log = read_megatron_log(cut_in_line, None).unwrap();
        assert_eq!(log.iterations.len(), 4);
        assert_eq!(log.step_statistics().unwrap().median_step_ms, 1020.0);
    }

    /// Several ranks writing at once under torchrun and Slurm prefixes: memory lines are kept
    /// per rank, whatever order they arrive in, and the largest report of each rank counts.
    #[test]
    fn interleaved_ranks_under_launcher_prefixes() {
        let text = "\
3: [default3]:[Rank 3] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2048.0 | reserved: 3.0 | max reserved: 3072.0
0: [default0]:[Rank 0] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 1024.0 | reserved: 3.0 | max reserved: 2048.0
3: [default3]:[Rank 3] (after 20 iterations) memory (MB) | allocated: 1.0 | max allocated: 4096.0 | reserved: 3.0 | max reserved: 5120.0
0: [default0]: [2026-11-02 10:00:00] iteration       20/     100 | elapsed time per iteration (ms): 812.5 |
";
        let log = read_megatron_log(text, None).unwrap();
        let peaks = log.peak_memory_by_rank();
        let by_rank: Vec<(u32, f64)> = peaks.iter().map(|r| (r.rank, r.max_reserved_mib)).collect();
        assert!(
            by_rank.contains(&(3, 5120.0)) && by_rank.contains(&(0, 2048.0)),
            "{by_rank:?}"
        );
        assert_eq!(log.iterations[0].elapsed_ms, 812.5);
    }

    /// Megatron-Bridge prints its configuration as a summary of values that differ from
    /// Megatron Core's defaults (`ConfigContainer.log_non_default_values`,
    /// src/megatron/bridge/training/config.py at 067f987d), not as an argument dump.
    #[test]
    fn reads_the_bridge_configuration_summary() {
        let text = "\
[default0]:======================================================================
[default0]:Configuration Summary (Non-Default Values vs Megatron Core)
[default0]:======================================================================
[default0]:
[default0]:[optimizer] Non-default values (vs Mcore OptimizerConfig):
[default0]:  lr: 0.0003  (Mcore default: None)
[default0]:  use_distributed_optimizer: True  (Mcore default: False)
[default0]:
[default0]:[ddp] Non-default values (vs Mcore DistributedDataParallelConfig):
[default0]:  overlap_grad_reduce: True  (Mcore default: False)
[default0]:
[default0]:[model] Non-default values (vs Mcore TransformerConfig):
[default0]:  context_parallel_size: 4  (Mcore default: 1)
[default0]:  expert_model_parallel_size: 8  (Mcore default: 1)
[default0]:  recompute_granularity: 'selective'  (Mcore default: None)
[default0]:  recompute_modules: ['moe_act', 'layernorm']  (Mcore default: ['core_attn'])
[default0]:  sequence_parallel: True  (Mcore default: False)
[default0]:  tensor_model_parallel_size: 2  (Mcore default: 1)
[default0]:
[default0]:----------------------------------------------------------------------
[default0]:Other Configuration Values:
[default0]:----------------------------------------------------------------------
[default0]:
[default0]:[train]:
[default0]:  global_batch_size: 64
[default0]:  micro_batch_size: 1
[default0]:
[default0]:[dataset]:
[default0]:  seq_length: 32768
[default0]:
[default0]:======================================================================
[default0]:Step Time : 0.79s GPU utilization: 62.4MODEL_TFLOP/s/GPU
";
        let log = read_megatron_log(text, Some(&ModelSpec::Id("qwen3-30b-a3b".into()))).unwrap();
        let config = log.config.expect("configuration from the summary");
        assert_eq!((config.tp(), config.cp(), config.ep()), (2, 4, 8));
        assert_eq!(config.seq_length, Some(32768));
        assert_eq!(config.global_batch_size, Some(64));
        let modules: Vec<&str> = config
            .recompute_modules()
            .iter()
            .map(|m| m.name())
            .collect();
        assert_eq!(modules, ["moe_act", "layernorm"]);
        assert_eq!(log.iterations.len(), 1);
        // What the summary does not list is at Megatron Core's default, and said so.
        assert_eq!(config.use_distributed_optimizer, Some(true));
        assert_eq!(config.overlap_grad_reduce, Some(true));
        assert_eq!(config.overlap_param_gather, Some(false));
        assert_eq!(config.moe_router_force_load_balancing, Some(false));
        assert!(config
            .assumed_defaults
            .iter()
            .any(|d| d.key == "overlap_param_gather" && d.why.contains("Megatron Core's default")));
        assert!(config
            .assumed_defaults
            .iter()
            .all(|d| d.key != "use_distributed_optimizer"));
        assert_eq!(
            python_repr("<AttnBackend.auto: 5>"),
            serde_json::json!("auto")
        );
        assert_eq!(python_repr("[1, 2]"), serde_json::json!([1, 2]));
    }
}
