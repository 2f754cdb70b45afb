//! `attention_backend`: the backends that materialise the attention scores (Transformer
//! Engine's unfused attention, Megatron-Core's local attention) against the fused kernels, in
//! memory (hand-counted from the card's bytes per score), time (the score traffic bounds it),
//! the context-parallel refusal, and the readers that carry the setting in.

mod model_support;

use model_support::{arch, cfg, constants, hw};
use moe_skills::inputs::python_recipe::RecipeFile;
use moe_skills::inputs::{parse_megatron_args, read_value};
use moe_skills::model::{evaluate, AttentionBackend, Estimate};
use serde_json::json;

const GIB: f64 = (1u64 << 30) as f64;

/// Qwen3-30B-A3B (48 layers, 32 query heads, 4 KV heads of 128) on 8 H100, one microbatch
/// of one sequence on one pipeline stage: every layer's activations are in flight at once.
fn qwen30b(seq: u32, extra: &str) -> Estimate {
    let yaml = format!(
        "{{num_gpus: 8, seq_length: {seq}, micro_batch_size: 1, global_batch_size: 8,
          tp: 1, pp: 1, ep: 8, {extra}}}"
    );
    evaluate(
        &arch("qwen3-30b-a3b"),
        &hw("h100"),
        &constants(),
        &cfg(&yaml),
    )
}

fn scores_gib(e: &Estimate) -> f64 {
    e.memory.activations_by_module_gib.attention_scores
}

#[test]
fn unfused_attention_keeps_the_bf16_probabilities_of_every_layer() {
    // 48 layers × 4096 queries × 4096 keys × 32 heads × 2 bytes = 48 GiB exactly; fused
    // attention keeps none.
    let unfused = qwen30b(4096, "attention_backend: unfused");
    let expected = 48.0 * 4096.0 * 4096.0 * 32.0 * 2.0 / GIB;
    assert!(
        (scores_gib(&unfused) - expected).abs() < 1e-9,
        "{}",
        scores_gib(&unfused)
    );
    assert_eq!(scores_gib(&qwen30b(4096, "attention_backend: auto")), 0.0);
    assert_eq!(scores_gib(&qwen30b(4096, "")), 0.0);
    // Besides the scores, the unfused layer keeps K and V repeated to the 32 query heads (the
    // GEMMs' inputs) and no fp32 softmax statistics: 2·32·128·2 − 32·4 bytes per token.
    let auto = qwen30b(4096, "");
    let attention_delta = unfused.memory.activations_by_module_gib.attention
        - auto.memory.activations_by_module_gib.attention;
    let expected = 48.0 * 4096.0 * (2.0 * 32.0 * 128.0 * 2.0 - 32.0 * 4.0) / GIB;
    assert!(
        (attention_delta - expected).abs() < 1e-9,
        "{attention_delta}"
    );
    // One layer's backward holds dP and dS on top (2 + 2 bytes per score).
    let working = unfused.memory.breakdown_gib.backward_working_set;
    assert!(working >= 4096.0 * 4096.0 * 32.0 * 4.0 / GIB, "{working}");
    assert!(unfused.memory.headroom_gib < 0.0 && auto.memory.peak_gib < unfused.memory.peak_gib);
}

#[test]
fn long_rows_take_the_fp32_softmax_and_dropout_keeps_its_mask() {
    // At 32K keys Transformer Engine's fused softmax kernel (keys < 16384) is out: PyTorch's
    // FP32 softmax keeps its FP32 output and the BF16 cast (6 bytes per score).
    let long = qwen30b(32768, "attention_backend: unfused");
    let per_layer = 32768.0 * 32768.0 * 32.0 / GIB;
    assert!((scores_gib(&long) - 48.0 * 6.0 * per_layer).abs() < 1e-6);
    // Megatron-Core's local softmax kernel stops at 4096 keys: 8192 is already the fallback.
    let local = qwen30b(8192, "attention_backend: local");
    assert!((scores_gib(&local) - 48.0 * 6.0 * 8192.0 * 8192.0 * 32.0 / GIB).abs() < 1e-6);
    // Dropout adds its boolean mask and the dropped probabilities (1 + 2 bytes).
    let dropped = qwen30b(4096, "attention_backend: unfused, attention_dropout: 0.1");
    assert!((scores_gib(&dropped) - 48.0 * 5.0 * 4096.0 * 4096.0 * 32.0 / GIB).abs() < 1e-6);
    // `core_attn` recompute keeps none of it.
    let recomputed = qwen30b(
        4096,
        "attention_backend: unfused, recompute_granularity: selective, recompute_modules: [core_attn]",
    );
    assert_eq!(scores_gib(&recomputed), 0.0);
    assert!(recomputed
        .warnings
        .iter()
        .any(|w| w.contains("recomputed in the backward, not kept")));
}

#[test]
fn unfused_attention_is_priced_at_least_at_its_score_traffic() {
    let fused = qwen30b(4096, "");
    let unfused = qwen30b(4096, "attention_backend: unfused");
    let h100 = hw("h100");
    let hbm = h100.hbm_tb_per_s * 1e12 * h100.efficiency.hbm;
    // 22 bytes per score element forward + backward, 48 layers, one microbatch.
    let traffic = 48.0 * 22.0 * 4096.0 * 4096.0 * 32.0 / hbm;
    let priced = unfused.performance.breakdown_s.attention;
    assert!(priced >= traffic * (1.0 - 1e-9), "{priced} < {traffic}");
    assert!(priced < 2.0 * traffic, "{priced} vs {traffic}");
    assert!(priced > 2.0 * fused.performance.breakdown_s.attention);
    assert!(unfused.performance.model_tflops_per_gpu < fused.performance.model_tflops_per_gpu);
    // `flash` is priced as the card's fused kernels and says so.
    let flash = qwen30b(4096, "attention_backend: flash");
    assert_eq!(
        flash.performance.breakdown_s.attention,
        fused.performance.breakdown_s.attention
    );
    assert!(flash
        .warnings
        .iter()
        .any(|w| w.contains("attention_backend flash") && w.contains("not on the card")));
}

#[test]
fn materialising_backends_refuse_context_parallelism() {
    let run = |backend: &str| {
        let yaml = format!(
            "{{num_gpus: 64, seq_length: 131072, micro_batch_size: 1, global_batch_size: 8,
              tp: 2, cp: 8, pp: 1, ep: 8, recompute_granularity: full,
              recompute_method: uniform, recompute_num_layers: 1,
              attention_backend: {backend}}}"
        );
        evaluate(
            &arch("qwen3-30b-a3b"),
            &hw("h100"),
            &constants(),
            &cfg(&yaml),
        )
    };
    let refused = |e: &Estimate| {
        e.violations
            .iter()
            .find(|v| v.code == "materialised_attention_with_context_parallel")
            .map(|v| v.message.clone())
    };
    let local = refused(&run("local")).expect("local attention refuses CP");
    assert!(
        local.contains("only supported by TEDotProductAttention"),
        "{local}"
    );
    let unfused = refused(&run("unfused")).expect("unfused attention refuses CP");
    assert!(
        unfused.contains("No dot product attention backend"),
        "{unfused}"
    );
    assert!(refused(&run("auto")).is_none());
    assert!(refused(&run("fused")).is_none());
}

#[test]
fn readers_carry_the_backend_in() {
    // Megatron-LM's flag; its attention dropout defaults to 0.1, said where it matters.
    let line = parse_megatron_args("--attention-backend unfused --seq-length 4096").unwrap();
    assert_eq!(line.attention_backend, Some(AttentionBackend::Unfused));
    assert_eq!(line.attention_dropout, Some(0.1));
    assert!(line
        .assumed_defaults
        .iter()
        .any(|a| a.key == "attention_dropout"));
    let flash = parse_megatron_args("--attention-backend flash --seq-length 4096").unwrap();
    assert_eq!(flash.attention_backend, Some(AttentionBackend::Flash));
    assert_eq!(flash.attention_dropout, None);
    let given =
        parse_megatron_args("--attention-backend local --attention-dropout 0.0 --seq-length 4096")
            .unwrap();
    assert_eq!(given.attention_dropout, Some(0.0));
    assert!(
        given.assumed_defaults.is_empty(),
        "{:?}",
        given.assumed_defaults
    );
    // Override files and the argument dump write the enum member.
    let yaml = read_value(&json!({"model": {"attention_backend": "AttnBackend.local"}})).unwrap();
    assert_eq!(yaml.attention_backend, Some(AttentionBackend::Local));
    let unset = read_value(&json!({"attention_backend": null})).unwrap();
    assert_eq!(unset.attention_backend, None);
    // Megatron-Bridge's docs name members Megatron-Core does not have: refused, with the names.
    let wrong = read_value(&json!({"attention_backend": "AttnBackend.flash_attn"}))
        .expect_err("no such member")
        .to_string();
    assert!(
        wrong.contains("flash_attn") && wrong.contains("unfused"),
        "{wrong}"
    );
}

#[test]
fn a_bridge_recipe_writes_the_enum_member_it_imports() {
    // The shape of src/megatron/bridge/recipes/gemma3_vl/h100/gemma3_vl.py (Bridge 067f987df):
    // the enum imported from Megatron-Core, its member assigned.
    const RECIPE: &str = r#"
from megatron.core.transformer.enums import AttnBackend
from megatron.bridge.recipes.common import _pretrain_common


def pretrain_config():
    cfg = _pretrain_common()
    cfg.model.attention_backend = AttnBackend.unfused
    cfg.model.attention_dropout = 0.0
    return cfg
"#;
    let file = RecipeFile::parse(RECIPE).unwrap();
    let settings = file.settings("pretrain_config").unwrap();
    assert_eq!(
        settings.tree,
        json!({"model": {"attention_backend": "unfused", "attention_dropout": 0.0}})
    );
    // A name imported from anywhere else stays unknown.
    let elsewhere = RECIPE.replace(
        "megatron.core.transformer.enums",
        "megatron.bridge.models.enums",
    );
    let file = RecipeFile::parse(&elsewhere).unwrap();
    let settings = file.settings("pretrain_config").unwrap();
    assert!(settings
        .unevaluated
        .iter()
        .any(|(key, _)| key.ends_with("attention_backend")));
}

#[test]
fn a_launch_that_exports_an_attention_switch_is_checked_against_the_backend() {
    use moe_skills::inputs::read_launch_script;
    let script = |exports: &str, flags: &str| {
        format!(
            "#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n{exports}\n\
             torchrun --nproc_per_node 8 pretrain_gpt.py --expert-model-parallel-size 8 \\\n\
             --seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --bf16 {flags}\n"
        )
    };
    let conflict = |config: &moe_skills::model::TrainingConfig| {
        evaluate(&arch("qwen3-30b-a3b"), &hw("h100"), &constants(), config)
            .violations
            .iter()
            .any(|v| v.code == "attention_env_conflicts_with_backend")
    };
    // `export NVTE_FUSED_ATTN=0` with the default backend: Megatron-Core stops.
    let exported = read_launch_script(&script("export NVTE_FUSED_ATTN=0", "")).unwrap();
    assert_eq!(
        exported
            .attention_env
            .as_ref()
            .and_then(|e| e.fused.as_deref()),
        Some("0")
    );
    assert!(conflict(&exported));
    // The switch is read, not listed as ignored; the other variable still is.
    assert!(!exported
        .ignored_settings
        .iter()
        .any(|s| s.key.contains("NVTE_FUSED_ATTN")));
    assert!(exported
        .ignored_settings
        .iter()
        .any(|s| s.key.contains("CUDA_DEVICE_MAX_CONNECTIONS")));
    // The same switches as the backend sets them: no conflict.
    let matching = read_launch_script(&script(
        "export NVTE_FUSED_ATTN=0\nexport NVTE_FLASH_ATTN=1",
        "--attention-backend flash",
    ))
    .unwrap();
    assert!(!conflict(&matching));
    // An inline assignment on the command line counts too.
    let inline = parse_megatron_args(
        "NVTE_UNFUSED_ATTN=0 python pretrain_gpt.py --seq-length 4096 --attention-backend unfused",
    )
    .unwrap();
    assert_eq!(
        inline
            .attention_env
            .as_ref()
            .and_then(|e| e.unfused.as_deref()),
        Some("0")
    );
    // As a field, only the three switches are accepted.
    let wrong = read_value(&json!({"attention_env": {"NVTE_FOO": "1"}}))
        .expect_err("not a switch")
        .to_string();
    assert!(wrong.contains("NVTE_FOO"), "{wrong}");
}

#[test]
fn the_dropout_and_the_switches_are_checked_against_their_limits() {
    use moe_skills::model::limits::check_config;
    let over = read_value(&json!({"attention_dropout": 1.5})).unwrap();
    let err = check_config(&over, "")
        .expect_err("a probability")
        .to_string();
    assert!(
        err.contains("attention_dropout") && err.contains("0..=1"),
        "{err}"
    );
    let long = read_value(&json!({"attention_env": {"NVTE_FUSED_ATTN": "1".repeat(300)}})).unwrap();
    let err = check_config(&long, "").expect_err("too long").to_string();
    assert!(err.contains("attention_env"), "{err}");
    let fine =
        read_value(&json!({"attention_dropout": 0.1, "attention_env": {"NVTE_FUSED_ATTN": 1}}))
            .unwrap();
    assert!(check_config(&fine, "").is_ok());
}
