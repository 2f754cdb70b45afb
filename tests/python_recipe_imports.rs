//! The Python recipe reader following `from ... import` into the modules of a checkout, in
//! the shape of Megatron-Bridge's performance recipes (Bridge 067f987df:
//! `perf_recipes/deepseek/b300/deepseek_v3.py` imports its helpers from
//! `perf_recipes/deepseek/common.py`, which re-exports the base recipe of
//! `recipes/deepseek/deepseek_v3.py`, itself an alias of `recipes/deepseek/h100/deepseek_v3.py`).

use std::collections::HashMap;

use moe_skills::inputs::python_recipe::{ModuleTexts, RecipeFile, RecipeSettings};
use serde_json::json;

const PERF_RECIPE: &str = r#"
from megatron.bridge.perf_recipes.model.common import (
    _benchmark_common,
    _model_common,
    model_pretrain_config,
)
from megatron.bridge.perf_recipes.environment import COMMON_ENV


def model_pretrain_64gpu_b300_bf16_config():
    cfg = model_pretrain_config()
    _model_common(cfg)
    cfg.model.pipeline_model_parallel_size = 4
    cfg.model.expert_model_parallel_size = 8
    _benchmark_common(cfg)
    cfg.env_vars = {**COMMON_ENV, "NVTE_FWD_LAYERNORM_SM_MARGIN": 20}
    return cfg
"#;

const MODEL_COMMON: &str = r#"
from megatron.bridge.perf_recipes._common import _benchmark_common
from megatron.bridge.recipes.model.model import model_pretrain_config


def _model_common(cfg) -> None:
    cfg.model.recompute_granularity = "selective"
    cfg.model.moe_flex_dispatcher_backend = "hybridep"
    cfg.model.moe_token_dispatcher_type = "flex"
"#;

const BENCHMARK_COMMON: &str = r#"
def _benchmark_common(cfg, cross_entropy_impl: str = "te") -> None:
    cfg.train.train_iters = 50
    cfg.model.cross_entropy_fusion_impl = cross_entropy_impl
    cfg.ddp.grad_reduce_in_fp32 = False
    if getattr(cfg.model, "moe_flex_dispatcher_backend", None) == "hybridep":
        cfg.model.moe_hybridep_num_sms = 32
    if hasattr(cfg.model, "use_op_fuser") and cfg.model.use_op_fuser:
        cfg.model.use_op_fuser = False
"#;

const ENVIRONMENT: &str = "COMMON_ENV = {\"CUDA_DEVICE_MAX_CONNECTIONS\": 1}\n";

// `recipes/model/model.py` only re-exports, under another name, as Bridge's
// `recipes/deepseek/deepseek_v3.py` does.
const ALIASES: &str = r#"
from megatron.bridge.recipes.model.h100.model import (
    model_pretrain_1024gpu_h100_bf16_config as model_pretrain_config,
)
"#;

const BASE: &str = r#"
def _layout(pp: int):
    if pp == 4:
        return "Et|tt|tt|tL"
    raise ValueError("no layout")


def set_layout(model_cfg) -> None:
    try:
        model_cfg.pipeline_model_parallel_layout = _layout(model_cfg.pipeline_model_parallel_size)
    except ValueError:
        pass


def model_pretrain_1024gpu_h100_bf16_config():
    cfg = ConfigContainer(model=GPTModelProvider(), train=TrainingConfig())
    cfg.model.seq_length = 4096
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.pipeline_model_parallel_size = 8
    cfg.model.recompute_granularity = "full"
    set_layout(cfg.model)
    return cfg
"#;

fn checkout() -> ModuleTexts {
    let module = |name: &str, text: &str| (format!("megatron.bridge.{name}"), text.to_owned());
    ModuleTexts::new(
        Some("megatron.bridge.perf_recipes.model.b300.model".into()),
        HashMap::from([
            module("perf_recipes.model.common", MODEL_COMMON),
            module("perf_recipes._common", BENCHMARK_COMMON),
            module("perf_recipes.environment", ENVIRONMENT),
            module("recipes.model.model", ALIASES),
            module("recipes.model.h100.model", BASE),
        ]),
    )
}

fn read(source: &str, recipe: &str, modules: Option<&ModuleTexts>) -> RecipeSettings {
    let file = RecipeFile::parse(source).expect("test source parses");
    let loader = modules.map(|m| m as &dyn moe_skills::inputs::python_recipe::ModuleLoader);
    file.settings_with(recipe, loader).expect("recipe reads")
}

#[test]
fn imported_base_recipes_and_helpers_are_evaluated_where_they_are_defined() {
    let texts = checkout();
    let s = read(
        PERF_RECIPE,
        "model_pretrain_64gpu_b300_bf16_config",
        Some(&texts),
    );
    let model = &s.tree["model"];
    // From the base recipe two modules away (through an aliased re-export).
    assert_eq!(model["seq_length"], 4096, "{}", s.tree);
    assert_eq!(model["tensor_model_parallel_size"], 2);
    // The perf file's own lines and its helpers, in order: the helper overrides the base.
    assert_eq!(model["pipeline_model_parallel_size"], 4);
    assert_eq!(model["recompute_granularity"], "selective");
    // `_benchmark_common`'s real body, its `getattr` condition decided from what was set.
    assert_eq!(model["moe_hybridep_num_sms"], 32);
    assert_eq!(model["cross_entropy_fusion_impl"], "te");
    assert_eq!(s.tree["train"]["train_iters"], 50);
    assert_eq!(s.tree["ddp"]["grad_reduce_in_fp32"], json!(false));
    // An imported constant unpacked into a dict.
    assert_eq!(s.tree["env_vars"]["CUDA_DEVICE_MAX_CONNECTIONS"], 1);
    // The base's layout helper ran at the base's PP8, where `_layout` raises: the `except`
    // clause caught it and nothing was set.
    assert!(model.get("pipeline_model_parallel_layout").is_none());
    // `hasattr` on a field the files never set is not decided: listed, not guessed.
    let gaps: Vec<&str> = s.unevaluated.iter().map(|(k, _)| k.as_str()).collect();
    assert!(gaps.iter().any(|k| k.contains("use_op_fuser")), "{gaps:?}");
    // The base recipe is still named (it names the model where no checkpoint does).
    assert_eq!(s.base_recipe.as_deref(), Some("model_pretrain_config"));
    assert_eq!(
        s.modules_read,
        vec![
            "megatron.bridge.perf_recipes.model.common",
            "megatron.bridge.recipes.model.model",
            "megatron.bridge.recipes.model.h100.model",
            "megatron.bridge.perf_recipes._common",
            "megatron.bridge.perf_recipes.environment",
        ]
    );
}

#[test]
fn without_the_modules_imported_names_stay_unknown_and_say_so() {
    let s = read(PERF_RECIPE, "model_pretrain_64gpu_b300_bf16_config", None);
    assert!(s.modules_read.is_empty());
    assert!(s.tree["model"].get("seq_length").is_none());
    assert!(
        s.unevaluated
            .iter()
            .any(|(_, why)| why.contains("defined outside this file")),
        "{:?}",
        s.unevaluated
    );
}

#[test]
fn a_missing_module_leaves_only_its_names_unknown() {
    let mut texts = checkout();
    texts
        .modules
        .remove("megatron.bridge.recipes.model.h100.model");
    let s = read(
        PERF_RECIPE,
        "model_pretrain_64gpu_b300_bf16_config",
        Some(&texts),
    );
    assert!(s.tree["model"].get("seq_length").is_none(), "{}", s.tree);
    assert_eq!(s.tree["model"]["moe_hybridep_num_sms"], 32);
}

#[test]
fn a_module_that_is_not_python_is_listed_as_not_read() {
    let mut texts = checkout();
    texts.modules.insert(
        "megatron.bridge.perf_recipes.environment".into(),
        "def broken(:\n".into(),
    );
    let s = read(
        PERF_RECIPE,
        "model_pretrain_64gpu_b300_bf16_config",
        Some(&texts),
    );
    assert!(
        s.unevaluated.iter().any(
            |(k, why)| k == "module megatron.bridge.perf_recipes.environment"
                && why.contains("not valid Python")
        ),
        "{:?}",
        s.unevaluated
    );
}

const TRY_AND_BUILTINS: &str = r#"
def _pick(n):
    if n > 2:
        raise ValueError("too many")
    return n


def recipe():
    cfg = ConfigContainer(model=GPTModelProvider())
    cfg.model.num_layers = 4
    try:
        cfg.model.pipeline_model_parallel_size = _pick(2)
    except ValueError:
        cfg.model.pipeline_model_parallel_size = 1
    else:
        cfg.model.virtual_pipeline_model_parallel_size = 2
    finally:
        cfg.model.sequence_parallel = False
    try:
        cfg.model.tensor_model_parallel_size = 2
        cfg.model.context_parallel_size = _pick(8)
        cfg.model.num_layers = 99
    except ValueError:
        cfg.model.context_parallel_size = 1
    if isinstance(getattr(cfg.model, "num_layers", None), int) and hasattr(cfg.model, "num_layers"):
        cfg.model.expert_model_parallel_size = 4
    try:
        cfg.model.micro_batch_size = _pick(9)
    except KeyError:
        pass
    except ValueError:
        pass
    return cfg
"#;

#[test]
fn try_blocks_run_their_body_or_their_one_handler() {
    let s = read(TRY_AND_BUILTINS, "recipe", None);
    let model = &s.tree["model"];
    assert_eq!(model["pipeline_model_parallel_size"], 2, "{}", s.tree);
    assert_eq!(model["virtual_pipeline_model_parallel_size"], 2);
    assert_eq!(model["sequence_parallel"], json!(false));
    assert_eq!(model["context_parallel_size"], 1);
    // The statement before the raising one ran, as in Python; the one after did not.
    assert_eq!(model["tensor_model_parallel_size"], 2);
    assert_eq!(model["num_layers"], 4);
    assert_eq!(model["expert_model_parallel_size"], 4);
    // Two handlers: which one catches is not decided, so the block is listed.
    assert!(model.get("micro_batch_size").is_none());
    assert!(
        s.unevaluated
            .iter()
            .any(|(k, why)| k.contains("micro_batch_size") && why.contains("except")),
        "{:?}",
        s.unevaluated
    );
}

/// `check --config` on a recipe inside a checkout reads its base recipe from the files beside
/// it: the sequence length the base sets needs no `--seq-length`.
#[test]
fn check_reads_the_imports_of_a_recipe_in_a_checkout() {
    let root = std::env::temp_dir().join(format!("moe-skills-checkout-{}", std::process::id()));
    let src = root.join("src");
    let texts = checkout();
    for (module, text) in &texts.modules {
        let path = src.join(module.replace('.', "/")).with_extension("py");
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("create folders");
        std::fs::write(&path, text).expect("write a module");
    }
    let recipe = src.join("megatron/bridge/perf_recipes/model/b300/model.py");
    std::fs::create_dir_all(recipe.parent().expect("a folder")).expect("create folders");
    std::fs::write(&recipe, PERF_RECIPE).expect("write the recipe");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args(["--json", "check", "--config"])
        .arg(&recipe)
        .args(["--recipe", "model_pretrain_64gpu_b300_bf16_config"])
        .args(["--model", "qwen3-30b-a3b"])
        .output()
        .expect("run moe-skills");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let body: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(body["layout"]["seq_length"], 4096, "{}", body["layout"]);
    assert_eq!(body["layout"]["tp"], 2, "{}", body["layout"]);
    assert_eq!(body["layout"]["pp"], 4, "{}", body["layout"]);
    std::fs::remove_dir_all(&root).expect("clean up");
}

// Mirrors recipes/common.py and recipes/utils/optimizer_utils.py (Bridge 067f987df):
// `opt_cfg, scheduler_cfg = distributed_fused_adam_with_cosine_annealing(...)`, which ends
// `return optimizer, scheduler`.
const TUPLE_RETURN: &str = r#"
def _optimizer(lr: float = 3e-4):
    optimizer = OptimizerConfig(optimizer="adam", lr=lr, use_distributed_optimizer=True)
    scheduler = SchedulerConfig(lr_warmup_iters=10)
    return optimizer, scheduler


def recipe():
    opt_cfg, scheduler_cfg = _optimizer(lr=1e-4)
    first, *rest = [1, 2, 3]
    cfg = ConfigContainer(optimizer=opt_cfg, scheduler=scheduler_cfg)
    cfg.train = TrainingConfig(micro_batch_size=first)
    return cfg
"#;

#[test]
fn a_returned_pair_unpacks_into_its_names() {
    let s = read(TUPLE_RETURN, "recipe", None);
    assert_eq!(s.tree["optimizer"]["optimizer"], "adam", "{}", s.tree);
    assert_eq!(s.tree["optimizer"]["lr"], 1e-4);
    assert_eq!(s.tree["scheduler"]["lr_warmup_iters"], 10);
    // The constructors' unnamed fields stay listed under the names they went to.
    let keys: Vec<&str> = s.unevaluated.iter().map(|(k, _)| k.as_str()).collect();
    assert!(
        keys.iter()
            .any(|k| k.starts_with("optimizer") && k.contains("OptimizerConfig")),
        "{keys:?}"
    );
    // A starred target is not unpacked: the name it feeds is listed, not guessed.
    assert!(
        s.tree["train"].get("micro_batch_size").is_none(),
        "{}",
        s.tree
    );
    assert!(
        keys.iter().any(|k| k.contains("micro_batch_size")),
        "{keys:?}"
    );
}

/// A performance recipe named like the library recipe it starts from (Bridge's
/// `perf_recipes/deepseek/h100/deepseek_v3.py` defines
/// `deepseek_v3_pretrain_1024gpu_h100_bf16_config` and calls the library's function of that
/// name through the alias `deepseek_v3_pretrain_config`): the call reaches the library's
/// function; it is not the recipe calling itself.
#[test]
fn a_recipe_may_share_its_name_with_the_base_it_imports() {
    const SAME_NAME: &str = r#"
from megatron.bridge.perf_recipes.model.common import _model_common, model_pretrain_config


def model_pretrain_1024gpu_h100_bf16_config():
    cfg = model_pretrain_config()
    _model_common(cfg)
    cfg.model.expert_model_parallel_size = 64
    return cfg
"#;
    let texts = checkout();
    let s = read(
        SAME_NAME,
        "model_pretrain_1024gpu_h100_bf16_config",
        Some(&texts),
    );
    let model = &s.tree["model"];
    assert_eq!(model["seq_length"], 4096, "{}", s.tree);
    assert_eq!(model["tensor_model_parallel_size"], 2);
    assert_eq!(model["recompute_granularity"], "selective");
    assert_eq!(model["expert_model_parallel_size"], 64);
    assert!(
        s.unevaluated
            .iter()
            .all(|(_, why)| !why.contains("calls itself")),
        "{:?}",
        s.unevaluated
    );
}

/// A recipe file away from its checkout: the command line names the calls it could not follow
/// instead of answering "seq_length missing".
#[test]
fn a_recipe_without_its_checkout_names_what_it_reaches_for() {
    let dir = std::env::temp_dir().join(format!("moe-skills-alone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a folder");
    let recipe = dir.join("model.py");
    std::fs::write(&recipe, PERF_RECIPE).expect("write the recipe");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args(["check", "--config"])
        .arg(&recipe)
        .args(["--model", "qwen3-30b-a3b"])
        .output()
        .expect("run moe-skills");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("does not set seq_length"), "{stderr}");
    assert!(stderr.contains("`model_pretrain_config`"), "{stderr}");
    assert!(stderr.contains("inside its checkout"), "{stderr}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}
