//! triage-oom with a Python `before` recipe and a commit's diff: the diff is applied to the
//! whole files and the recipes read on both sides, with the modules they import when the file
//! sits in a checkout (the shape of Megatron-Bridge's performance recipes, whose settings live
//! in shared helpers: a commit to `perf_recipes/<model>/common.py` changes every recipe
//! calling it, and a plain `diff -u` names no function in its hunk headers); and a whole
//! Megatron-LM command line with a diff, which runs Megatron-LM's defaults for dropped flags.

use std::path::{Path, PathBuf};
use std::process::Command;

use moe_skills::catalog::Catalog;
use moe_skills::inputs::ConfigSource;
use moe_skills::model::config::ModelSpec;
use moe_skills::tools::triage;

const BASE: &str = r#"
def model_pretrain_1024gpu_h100_bf16_config():
    cfg = ConfigContainer(model=GPTModelProvider(), train=TrainingConfig())
    cfg.model.seq_length = 4096
    cfg.model.tensor_model_parallel_size = 1
    cfg.model.pipeline_model_parallel_size = 1
    cfg.model.recompute_granularity = "full"
    cfg.model.recompute_method = "uniform"
    cfg.model.recompute_num_layers = 1
    cfg.train.global_batch_size = 512
    cfg.train.micro_batch_size = 1
    return cfg
"#;

const COMMON: &str = r#"
from megatron.bridge.recipes.model.h100.model import model_pretrain_1024gpu_h100_bf16_config as model_pretrain_config


def _model_common(cfg) -> None:
    cfg.model.recompute_granularity = "selective"
    cfg.model.recompute_method = None
    cfg.model.recompute_num_layers = None
    cfg.model.recompute_modules = ["moe"]
"#;

const RECIPES: &str = r#"
from megatron.bridge.perf_recipes.model.common import _model_common, model_pretrain_config


def model_pretrain_16gpu_h100_bf16_config():
    cfg = model_pretrain_config()
    _model_common(cfg)
    cfg.model.expert_model_parallel_size = 16
    return cfg


def model_pretrain_32gpu_h100_bf16_config():
    cfg = model_pretrain_config()
    _model_common(cfg)
    cfg.model.expert_model_parallel_size = 8
    return cfg
"#;

/// A commit to the shared helper: no recompute at all.
const HELPER_DIFF: &str = "\
diff --git a/src/megatron/bridge/perf_recipes/model/common.py b/src/megatron/bridge/perf_recipes/model/common.py
--- a/src/megatron/bridge/perf_recipes/model/common.py
+++ b/src/megatron/bridge/perf_recipes/model/common.py
@@ -3,7 +3,7 @@
 
 
 def _model_common(cfg) -> None:
-    cfg.model.recompute_granularity = \"selective\"
+    cfg.model.recompute_granularity = None
     cfg.model.recompute_method = None
     cfg.model.recompute_num_layers = None
     cfg.model.recompute_modules = [\"moe\"]
";

/// A plain `diff -u` of the recipe file (no function in the hunk header) changing one recipe.
const RECIPE_DIFF: &str = "\
--- h100/model.py\t2026-11-24 10:00:00
+++ h100/model.py\t2026-11-24 10:05:00
@@ -15,6 +15,6 @@
 def model_pretrain_32gpu_h100_bf16_config():
     cfg = model_pretrain_config()
     _model_common(cfg)
-    cfg.model.expert_model_parallel_size = 8
+    cfg.model.expert_model_parallel_size = 2
     return cfg
";

/// Writes the three modules under a fresh `src/` folder; returns the recipe file's path.
fn checkout(name: &str) -> (PathBuf, PathBuf) {
    let root = std::env::temp_dir().join(format!("moe-skills-{name}-{}", std::process::id()));
    let package = root.join("src/megatron/bridge");
    for (path, text) in [
        ("recipes/model/h100/model.py", BASE),
        ("perf_recipes/model/common.py", COMMON),
        ("perf_recipes/model/h100/model.py", RECIPES),
    ] {
        let file = package.join(path);
        std::fs::create_dir_all(file.parent().expect("a folder")).expect("create folders");
        std::fs::write(&file, text).expect("write a module");
    }
    let recipe = package.join("perf_recipes/model/h100/model.py");
    (root, recipe)
}

fn triage_cli(recipe: &Path, diff: &str, extra: &[&str]) -> serde_json::Value {
    let diff_file = recipe.with_extension("diff");
    std::fs::write(&diff_file, diff).expect("write the diff");
    let output = Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args(["--json", "triage-oom", "--before"])
        .arg(recipe)
        .arg("--diff")
        .arg(&diff_file)
        .args(["--model", "qwen3-30b-a3b"])
        .args(extra)
        .output()
        .expect("run moe-skills");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&output.stderr)))
}

fn recipes_of(out: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = std::iter::once(out)
        .chain(out["other_recipes"].as_array().into_iter().flatten())
        .filter_map(|o| o["recipe"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[test]
fn a_commit_to_a_shared_helper_is_triaged_for_every_recipe_calling_it() {
    let (root, recipe) = checkout("helper-commit");
    let out = triage_cli(&recipe, HELPER_DIFF, &[]);
    let rationale = out["rationale"].as_str().expect("rationale");
    assert!(
        rationale.contains("**Read as whole files**: the diff applied to `src/megatron/bridge/perf_recipes/model/common.py`"),
        "{rationale}"
    );
    assert_eq!(
        recipes_of(&out),
        [
            "model_pretrain_16gpu_h100_bf16_config",
            "model_pretrain_32gpu_h100_bf16_config"
        ]
    );
    // Selective recompute of the experts, from the helper, is what the commit removed; the
    // base recipe's full recompute was already overridden before it.
    let change = &out["causes"][0];
    assert_eq!(change["field"], "recompute_granularity", "{change}");
    assert_eq!(change["before"], "selective", "{change}");
    assert!(
        out["memory_delta_gib"].as_f64().expect("delta") > 0.0,
        "{out}"
    );
    // Named, it triages that recipe alone.
    let one = triage_cli(
        &recipe,
        HELPER_DIFF,
        &["--recipe", "model_pretrain_16gpu_h100_bf16_config"],
    );
    assert_eq!(recipes_of(&one), ["model_pretrain_16gpu_h100_bf16_config"]);
    std::fs::remove_dir_all(&root).expect("clean up");
}

#[test]
fn a_plain_diff_finds_the_recipe_it_changes_by_line() {
    let (root, recipe) = checkout("plain-diff");
    let out = triage_cli(&recipe, RECIPE_DIFF, &[]);
    assert_eq!(recipes_of(&out), ["model_pretrain_32gpu_h100_bf16_config"]);
    let change = &out["causes"][0];
    assert_eq!(change["field"], "expert_model_parallel_size", "{change}");
    assert_eq!(change["before"], 8, "{change}");
    assert_eq!(change["after"], 2, "{change}");
    // The settings inherited from the base recipe two modules away are in both sides.
    assert_eq!(
        out["after_config"]["seq_length"], 4096,
        "{}",
        out["after_config"]
    );
    std::fs::remove_dir_all(&root).expect("clean up");
}

/// Over MCP there is no checkout: the diff is still applied to the whole `before` text.
#[test]
fn without_a_checkout_the_diff_is_applied_to_the_before_text() {
    let before = RECIPES
        .replace(
            "from megatron.bridge.perf_recipes.model.common import _model_common, model_pretrain_config\n",
            "",
        )
        .replace("model_pretrain_config()", "ConfigContainer(model=GPTModelProvider(seq_length=4096), train=TrainingConfig(global_batch_size=512, micro_batch_size=1))")
        .replace("    _model_common(cfg)\n", "");
    let diff = "\
--- model.py
+++ model.py
@@ -9,4 +9,4 @@
 def model_pretrain_32gpu_h100_bf16_config():
     cfg = ConfigContainer(model=GPTModelProvider(seq_length=4096), train=TrainingConfig(global_batch_size=512, micro_batch_size=1))
-    cfg.model.expert_model_parallel_size = 8
+    cfg.model.expert_model_parallel_size = 2
     return cfg
";
    let out = triage::triage_oom(
        &Catalog::load_with_embedded(Vec::<PathBuf>::new()),
        triage::TriageOomInput {
            before: ConfigSource::Text(before),
            after: None,
            diff: Some(diff.into()),
            recipe: None,
            model: Some(ModelSpec::Id("qwen3-30b-a3b".into())),
            hardware: None,
            num_gpus: None,
            modules: Default::default(),
        },
    )
    .expect("triage");
    assert_eq!(
        out.recipe.as_deref(),
        Some("model_pretrain_32gpu_h100_bf16_config")
    );
    assert!(
        out.rationale.starts_with("**Read as whole files**"),
        "{}",
        out.rationale
    );
    assert!(
        !out.rationale.contains("modules they import"),
        "{}",
        out.rationale
    );
}

/// Over MCP the client sends the modules the recipe imports, keyed by their path in the
/// checkout: the base recipe and helper are evaluated from them, the diff of the helper is
/// applied to its text, and a module no recipe imports is named as unused.
#[test]
fn modules_sent_as_texts_are_imported_and_patched() {
    let out = triage::triage_oom(
        &Catalog::load_with_embedded(Vec::<PathBuf>::new()),
        triage::TriageOomInput {
            before: ConfigSource::Text(RECIPES.into()),
            after: None,
            diff: Some(HELPER_DIFF.into()),
            recipe: Some("model_pretrain_32gpu_h100_bf16_config".into()),
            model: Some(ModelSpec::Id("qwen3-30b-a3b".into())),
            hardware: None,
            num_gpus: None,
            modules: [
                ("src/megatron/bridge/perf_recipes/model/common.py", COMMON),
                ("src/megatron/bridge/recipes/model/h100/model.py", BASE),
                ("src/megatron/bridge/unused.py", "X = 1\n"),
            ]
            .into_iter()
            .map(|(path, text)| (path.to_owned(), text.to_owned()))
            .collect(),
        },
    )
    .expect("triage");
    assert_eq!(
        out.recipe.as_deref(),
        Some("model_pretrain_32gpu_h100_bf16_config")
    );
    assert_eq!(
        out.causes[0].field, "recompute_granularity",
        "{}",
        out.rationale
    );
    assert_eq!(out.after_config.seq_length, Some(4096));
    let unused: Vec<&str> = out
        .notes
        .ignored_settings
        .iter()
        .map(|i| i.key.as_str())
        .filter(|k| k.starts_with("modules: "))
        .collect();
    assert_eq!(unused, ["modules: src/megatron/bridge/unused.py"]);
}

/// A whole Megatron-LM command line runs Megatron-LM's default for a flag it drops: a commit
/// that removes `--use-distributed-optimizer` leaves every data-parallel rank with the whole
/// optimizer state, and the triage names it (before, an absent flag read as the recipes'
/// choice and the change was invisible).
#[test]
fn dropping_a_megatron_lm_flag_is_triaged_as_its_default() {
    let before = "\
torchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py \\
  --tensor-model-parallel-size 1 --expert-model-parallel-size 8 \\
  --seq-length 4096 --micro-batch-size 1 --global-batch-size 256 --bf16 \\
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \\
  --moe-token-dispatcher-type alltoall --moe-grouped-gemm
";
    let diff = "\
--- train.sh
+++ train.sh
@@ -1,5 +1,5 @@
 torchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py \\
   --tensor-model-parallel-size 1 --expert-model-parallel-size 8 \\
   --seq-length 4096 --micro-batch-size 1 --global-batch-size 256 --bf16 \\
-  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \\
+  --overlap-grad-reduce \\
   --moe-token-dispatcher-type alltoall --moe-grouped-gemm
";
    let out = triage::triage_oom(
        &Catalog::load_with_embedded(Vec::<PathBuf>::new()),
        triage::TriageOomInput {
            before: ConfigSource::Text(before.into()),
            after: None,
            diff: Some(diff.into()),
            recipe: None,
            model: Some(ModelSpec::Id("qwen3-30b-a3b".into())),
            hardware: Some("h100".into()),
            num_gpus: None,
            modules: Default::default(),
        },
    )
    .expect("triage");
    let root = out.causes.first().expect("a cause");
    assert_eq!(root.field, "use_distributed_optimizer");
    assert_eq!(
        (&root.before, &root.after),
        (&serde_json::json!(true), &serde_json::json!(false))
    );
    assert!(root.memory_delta_gib > 10.0, "{}", root.memory_delta_gib);
    assert!(
        out.causes.iter().any(|c| c.field == "overlap_param_gather"),
        "{:?}",
        out.causes
    );
}
