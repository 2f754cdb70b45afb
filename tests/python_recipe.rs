//! The Python recipe reader on small recipe texts written in the style of Megatron-Bridge's
//! recipes (setting lines only; each test names the Bridge file and commit whose shape it
//! mirrors).

use moe_skills::inputs::python_recipe::{PythonRecipeError, RecipeFile, RecipeKind};
use proptest::prelude::*;
use serde_json::json;

fn settings(source: &str, recipe: &str) -> (serde_json::Value, Vec<(String, String)>) {
    let file = RecipeFile::parse(source).expect("test source parses");
    let s = file.settings(recipe).expect("recipe exists");
    (s.tree, s.unevaluated)
}

fn gap_keys(gaps: &[(String, String)]) -> Vec<&str> {
    gaps.iter().map(|(k, _)| k.as_str()).collect()
}

// Mirrors src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py (Bridge 067f987df):
// a base recipe imported from elsewhere, then `cfg.<section>.<field> = value` lines.
const PERF_FUNCTION: &str = r#"
from megatron.bridge.perf_recipes.deepseek.common import _benchmark_common, deepseek_v3_pretrain_config


def deepseek_v3_pretrain_1024gpu_h100_bf16_config() -> ConfigContainer:
    """DeepSeek V3 pretrain: 1024 x H100, BF16."""
    cfg = deepseek_v3_pretrain_config()
    cfg.mixed_precision = bf16_mixed()

    cfg.model.tensor_model_parallel_size = 2
    cfg.model.pipeline_model_parallel_size = 8
    cfg.model.virtual_pipeline_model_parallel_size = None
    cfg.model.expert_model_parallel_size = 64
    cfg.model.sequence_parallel = True
    cfg.train.global_batch_size = 16_384
    cfg.train.micro_batch_size = 1
    cfg.model.recompute_modules = ["mla_up_proj", "mlp"]
    cfg.model.seq_length = 128 * 1024
    cfg.model.fp8_config.fp8_recipe = "blockwise"

    _benchmark_common(cfg)
    return cfg
"#;

#[test]
fn attribute_assignments_build_the_override_tree() {
    let (tree, gaps) = settings(
        PERF_FUNCTION,
        "deepseek_v3_pretrain_1024gpu_h100_bf16_config",
    );
    assert_eq!(
        tree,
        json!({
            "mixed_precision": "bf16_mixed",
            "model": {
                "tensor_model_parallel_size": 2,
                "pipeline_model_parallel_size": 8,
                "virtual_pipeline_model_parallel_size": null,
                "expert_model_parallel_size": 64,
                "sequence_parallel": true,
                "recompute_modules": ["mla_up_proj", "mlp"],
                "seq_length": 131072,
                "fp8_config": {"fp8_recipe": "blockwise"}
            },
            "train": {"global_batch_size": 16384, "micro_batch_size": 1},
            // Bridge's `_benchmark_common` reduces gradients in BF16 (perf_recipes/_common.py).
            "ddp": {"grad_reduce_in_fp32": false}
        })
    );
    // The imported base and the imported helper are both named, never dropped.
    let keys = gap_keys(&gaps);
    assert!(keys.contains(&"cfg"), "{gaps:?}");
    assert!(keys.contains(&"_benchmark_common(cfg)"), "{gaps:?}");
    let (_, reason) = gaps.iter().find(|(k, _)| k == "cfg").unwrap();
    assert!(reason.contains("deepseek_v3_pretrain_config"), "{reason}");
    let (_, reason) = gaps
        .iter()
        .find(|(k, _)| k == "_benchmark_common(cfg)")
        .unwrap();
    assert!(reason.contains("only ddp.grad_reduce_in_fp32"), "{reason}");
}

// Mirrors src/megatron/bridge/perf_recipes/gpt_oss/b300/gpt_oss.py (Bridge v0.6.0): the
// precision comes from the perf helper `_perf_precision("<compute dtype>")`.
const PERF_PRECISION: &str = r#"
from megatron.bridge.perf_recipes.gpt_oss.common import _benchmark_common, _perf_precision, gpt_oss_120b_pretrain_config


def gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config() -> ConfigContainer:
    cfg = gpt_oss_120b_pretrain_config()
    cfg.mixed_precision = _perf_precision("fp8_mx")
    cfg.model.expert_model_parallel_size = 8
    cfg.train.micro_batch_size = 4
    _benchmark_common(cfg)
    cfg.ddp.grad_reduce_in_fp32 = True
    return cfg
"#;

#[test]
fn the_perf_precision_helper_names_the_precision_and_the_base_recipe_is_kept() {
    let file = RecipeFile::parse(PERF_PRECISION).unwrap();
    let s = file
        .settings("gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config")
        .unwrap();
    assert_eq!(s.tree["mixed_precision"], json!("fp8_mx"));
    // A setting the recipe makes after the helper wins over the helper's.
    assert_eq!(s.tree["ddp"]["grad_reduce_in_fp32"], json!(true));
    assert_eq!(
        s.base_recipe.as_deref(),
        Some("gpt_oss_120b_pretrain_config")
    );
    let keys = gap_keys(&s.unevaluated);
    assert!(
        keys.iter()
            .any(|k| k.contains("_perf_precision(\"fp8_mx\")")),
        "{:?}",
        s.unevaluated
    );
}

#[test]
fn recipes_list_functions_and_constants_with_line_spans() {
    let source = "import torch\n\nSEQ = 4096\n\n@register\ndef a():\n    cfg = X()\n    return cfg\n\n\ndef b(x=1):\n    pass\n__all__ = ['a']\n";
    let file = RecipeFile::parse(source).unwrap();
    let spans = file.recipes();
    let summary: Vec<(&str, RecipeKind, usize, usize)> = spans
        .iter()
        .map(|s| (s.name.as_str(), s.kind, s.start_line, s.end_line))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("SEQ", RecipeKind::Constant, 3, 3),
            ("a", RecipeKind::Function, 5, 8),
            ("b", RecipeKind::Function, 11, 12),
        ]
    );
    assert_eq!(file.recipe_at_line(7).map(|s| s.name), Some("a".to_owned()));
    assert_eq!(file.recipe_at_line(5).map(|s| s.name), Some("a".to_owned()));
    assert_eq!(file.recipe_at_line(9), None);
    assert_eq!(file.recipe_at_line(1), None);
}

// Mirrors scripts/performance/configs/deepseek/deepseek_workload_base_configs.py
// (Bridge c8327cfc2^): a dataclass base and `replace(<base>, field=value)` chains and aliases.
const WORKLOAD_CONSTANTS: &str = r#"
from dataclasses import replace
import dataclasses

BASE_DEEPSEEK_V3_CONFIG = WorkloadBaseConfig(
    expert_tensor_parallel_size=1,
)

DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 = replace(
    BASE_DEEPSEEK_V3_CONFIG,
    num_gpus=256,
    micro_batch_size=2,
    expert_model_parallel_size=32,
    moe_flex_dispatcher_backend="hybridep",
    moe_a2a_overlap=False,
    recompute_modules=["mla_up_proj"],
)
DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BF16_V1 = dataclasses.replace(
    DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1,
    micro_batch_size=1,
    expert_model_parallel_size=64,
    recompute_modules=["moe_act"],
)
DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_CS_V1 = DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1
"#;

#[test]
fn replace_applies_the_base_first_then_the_overrides() {
    let (tree, gaps) = settings(
        WORKLOAD_CONSTANTS,
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BF16_V1",
    );
    assert_eq!(
        tree,
        json!({
            "expert_tensor_parallel_size": 1,
            "num_gpus": 256,
            "micro_batch_size": 1,
            "expert_model_parallel_size": 64,
            "moe_flex_dispatcher_backend": "hybridep",
            "moe_a2a_overlap": false,
            "recompute_modules": ["moe_act"]
        })
    );
    // The dataclass's own defaults are outside the file: said once, for the constructor.
    assert_eq!(gap_keys(&gaps), vec!["WorkloadBaseConfig(...)"]);
}

#[test]
fn an_alias_constant_has_its_targets_settings() {
    let (alias, _) = settings(
        WORKLOAD_CONSTANTS,
        "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_CS_V1",
    );
    let (target, _) = settings(WORKLOAD_CONSTANTS, "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1");
    assert_eq!(alias, target);
    assert_eq!(alias["micro_batch_size"], json!(2));
}

#[test]
fn replace_on_a_base_from_another_file_keeps_the_overrides_and_names_the_base() {
    let source = "from x import BASE\nCFG = replace(BASE, micro_batch_size=4)\n";
    let (tree, gaps) = settings(source, "CFG");
    assert_eq!(tree, json!({"micro_batch_size": 4}));
    assert_eq!(gap_keys(&gaps), vec!["BASE"]);
    assert!(gaps[0].1.contains("not defined in this file"), "{gaps:?}");
}

// Mirrors the keyword-default recipes of src/megatron/bridge/recipes/deepseek/deepseek_v3.py
// (Bridge 9a5e79865): parameters flow into a same-file model builder, a provider constructor
// and a `ConfigContainer(...)`.
const KEYWORD_DEFAULTS: &str = r#"
import torch

SEQ_LENGTH = 4096


def model_config(
    tensor_parallelism: int = 2,
    context_parallelism: int = 1,
    expert_parallelism: int = 64,
    recompute_modules: Optional[List[str]] = None,
    enable_deepep: bool = False,
    apply_rope_fusion: bool = True,
) -> DeepSeekV3ModelProvider:
    cfg = DeepSeekV3ModelProvider(
        tensor_model_parallel_size=tensor_parallelism,
        context_parallel_size=context_parallelism,
        expert_model_parallel_size=expert_parallelism,
        recompute_modules=recompute_modules,
        seq_length=SEQ_LENGTH,
    )
    cfg.moe_permute_fusion = True
    if apply_rope_fusion:
        cfg.apply_rope_fusion = True
    if enable_deepep:
        cfg.moe_token_dispatcher_type = "flex"
    return cfg


def pretrain_config(
    tensor_parallelism: int = 2,
    context_parallelism: int = 8,
    expert_parallelism: int = 64,
    pipeline_parallelism_dtype: Optional[torch.dtype] = torch.bfloat16,
    global_batch_size: int = 4096,
    micro_batch_size: int = 1,
    lr: float = 3e-4,
    recompute_modules: Optional[List[str]] = None,
    enable_deepep: bool = False,
) -> ConfigContainer:
    model_cfg = model_config(
        tensor_parallelism=tensor_parallelism,
        context_parallelism=context_parallelism,
        expert_parallelism=expert_parallelism,
        recompute_modules=recompute_modules,
        enable_deepep=enable_deepep,
    )
    model_cfg.pipeline_dtype = pipeline_parallelism_dtype
    opt_config, scheduler = distributed_fused_adam_with_cosine_annealing(max_lr=lr)
    opt_config.main_params_dtype = torch.float32
    cfg = ConfigContainer(
        model=model_cfg,
        train=TrainingConfig(
            train_iters=1_000_000,
            global_batch_size=global_batch_size,
            micro_batch_size=micro_batch_size,
        ),
        optimizer=opt_config,
    )
    return cfg


def pretrain_config_32nodes(**kwargs):
    return pretrain_config(tensor_parallelism=4, expert_parallelism=32)
"#;

#[test]
fn keyword_defaults_flow_into_the_fields_they_set() {
    let (tree, gaps) = settings(KEYWORD_DEFAULTS, "pretrain_config");
    assert_eq!(
        tree,
        json!({
            "model": {
                "tensor_model_parallel_size": 2,
                "context_parallel_size": 8,
                "expert_model_parallel_size": 64,
                "recompute_modules": null,
                "seq_length": 4096,
                "moe_permute_fusion": true,
                "apply_rope_fusion": true,
                "pipeline_dtype": "bfloat16"
            },
            "train": {"train_iters": 1000000, "global_batch_size": 4096, "micro_batch_size": 1},
            "optimizer": {"main_params_dtype": "float32"}
        })
    );
    let keys = gap_keys(&gaps);
    // The branch not taken (`enable_deepep` is False) is reported, not applied.
    assert!(
        keys.contains(&"model.moe_token_dispatcher_type"),
        "{gaps:?}"
    );
    let (_, why) = gaps
        .iter()
        .find(|(k, _)| k == "model.moe_token_dispatcher_type")
        .unwrap();
    assert!(
        why.contains("if enable_deepep") && why.contains("false"),
        "{why}"
    );
    // The optimizer comes from a tuple assignment of an imported call.
    assert!(keys.contains(&"optimizer: opt_config"), "{gaps:?}");
}

#[test]
fn arguments_given_by_a_caller_replace_the_defaults() {
    let (tree, _) = settings(KEYWORD_DEFAULTS, "pretrain_config_32nodes");
    assert_eq!(tree["model"]["tensor_model_parallel_size"], json!(4));
    assert_eq!(tree["model"]["expert_model_parallel_size"], json!(32));
    assert_eq!(tree["model"]["context_parallel_size"], json!(8));
}

#[test]
fn a_helper_of_the_same_file_is_applied_to_its_argument() {
    let source = r#"
def _common(cfg, dispatcher="alltoall"):
    cfg.model.moe_token_dispatcher_type = dispatcher
    cfg.model.moe_router_dtype = "fp32"


def recipe():
    cfg = base()
    cfg.model.moe_router_dtype = "fp64"
    _common(cfg, dispatcher="flex")
    cfg.train.micro_batch_size = 2
    return cfg


def derived():
    cfg = recipe()
    cfg.train.micro_batch_size = 4
    set_layout(cfg.model, "Et|(tt|)*30mL")
    return cfg
"#;
    let (tree, gaps) = settings(source, "recipe");
    assert_eq!(
        tree,
        json!({
            "model": {"moe_token_dispatcher_type": "flex", "moe_router_dtype": "fp32"},
            "train": {"micro_batch_size": 2}
        })
    );
    assert_eq!(gap_keys(&gaps), vec!["cfg"]);
    let (tree, gaps) = settings(source, "derived");
    assert_eq!(tree["train"]["micro_batch_size"], json!(4));
    assert_eq!(tree["model"]["moe_token_dispatcher_type"], json!("flex"));
    assert!(
        gap_keys(&gaps).contains(&"model: set_layout(cfg.model, \"Et|(tt|)*30mL\")"),
        "{gaps:?}"
    );
    // A helper's own settings are those of its first parameter.
    let (tree, _) = settings(source, "_common");
    assert_eq!(
        tree["model"]["moe_token_dispatcher_type"],
        json!("alltoall")
    );
}

#[test]
fn literals_evaluate_like_python() {
    let source = r#"
import torch

K = 1024
def r():
    cfg = ConfigContainer()
    cfg.a.int_ = 1_000
    cfg.a.neg = -3
    cfg.a.hex = 0x10
    cfg.a.float_ = 3e-4
    cfg.a.prod = 128 * K
    cfg.a.floordiv = -7 // 2
    cfg.a.mod = 7 % -2
    cfg.a.div = 7 / 2
    cfg.a.pow = 2 ** 10
    cfg.a.text = "E" + "t" * 3 + 'm' "L"
    cfg.a.tuple_ = (1, "x", None)
    cfg.a.nested = [[1, 2], []]
    cfg.a.dict_ = {"A": 1, "B": True}
    cfg.a.dtype = torch.bfloat16
    cfg.a.dtype32 = torch.float32
    cfg.a.cond = "x" if K > 1000 else "y"
    cfg.a.logic = K > 1 and K < 2048
    cfg.a.not_ = not False
    cfg.a.escape = "a\tb"
    cfg.a.raw = r"a\tb"
    return cfg
"#;
    let (tree, _) = settings(source, "r");
    assert_eq!(
        tree["a"],
        json!({
            "int_": 1000, "neg": -3, "hex": 16, "float_": 0.0003, "prod": 131072,
            "floordiv": -4, "mod": -1, "div": 3.5, "pow": 1024, "text": "EtttmL",
            "tuple_": [1, "x", null], "nested": [[1, 2], []], "dict_": {"A": 1, "B": true},
            "dtype": "bfloat16", "dtype32": "float32", "cond": "x", "logic": true,
            "not_": true, "escape": "a\tb", "raw": "a\\tb"
        })
    );
}

#[test]
fn what_cannot_be_evaluated_is_listed_with_the_reason() {
    let source = r#"
def r(name: str, flag: bool = True):
    cfg = ConfigContainer()
    cfg.model.expert_model_parallel_size = 8
    cfg.model.expert_model_parallel_size += 8
    cfg.model.a, cfg.model.b = 1, 2
    cfg.logger.name = f"run-{name}"
    cfg.model.cp = helper_from_elsewhere(4)
    cfg.env_vars["X"] = 1
    cfg.train.global_batch_size = 8 * unknown_name
    cfg.train.x = 2 ** 100
    for i in range(3):
        cfg.model.loop = i
    if name == "x":
        cfg.model.undecided = 1
    else:
        cfg.model.other = 2
    if flag:
        cfg.model.taken = 1
    else:
        cfg.model.not_taken = 2
    return cfg
"#;
    let (tree, gaps) = settings(source, "r");
    // `a, b = 1, 2` unpacks a known pair.
    assert_eq!(tree, json!({"model": {"a": 1, "b": 2, "taken": 1}}));
    let reason = |key: &str| {
        gaps.iter()
            .find(|(k, _)| k == key || k.starts_with(&format!("{key}:")))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| panic!("no gap for {key}: {gaps:?}"))
    };
    assert!(reason("model.expert_model_parallel_size").contains("augmented"));
    assert!(reason("logger.name").contains("f-string"));
    assert!(reason("model.cp").contains("helper_from_elsewhere"));
    assert!(reason("env_vars").contains("cfg.env_vars[\"X\"]"));
    assert!(reason("train.global_batch_size").contains("unknown_name"));
    assert!(reason("train.x").contains("overflow"));
    assert!(reason("model.loop").contains("for"));
    assert!(reason("model.undecided").contains("name == \"x\""));
    assert!(reason("model.other").contains("cannot be decided"));
    assert!(reason("model.not_taken").contains("an earlier branch"));
}

#[test]
fn a_section_replaced_by_a_constructor_drops_its_earlier_fields() {
    let source = r#"
def r():
    cfg = ConfigContainer()
    cfg.comm_overlap.tp_comm_overlap = False
    cfg.comm_overlap.old = 1
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True, overlap_moe_expert_parallel_comm=True)
    cfg.model = AutoBridge.from_hf_pretrained("x").to_megatron_provider(load_weights=False)
    cfg.model.context_parallel_size = 4
    return cfg
"#;
    let (tree, gaps) = settings(source, "r");
    assert_eq!(
        tree,
        json!({
            "comm_overlap": {"tp_comm_overlap": true, "overlap_moe_expert_parallel_comm": true},
            "model": {"context_parallel_size": 4}
        })
    );
    let keys = gap_keys(&gaps);
    assert!(
        keys.contains(&"comm_overlap: CommOverlapConfig(...)"),
        "{gaps:?}"
    );
    assert!(
        gaps.iter()
            .any(|(k, r)| k == "model" && r.contains("AutoBridge.from_hf_pretrained")),
        "{gaps:?}"
    );
}

#[test]
fn values_read_back_from_the_config_and_from_constants() {
    let source = r#"
LAYOUT = "|".join(["E", "t"])
TP = 4
def r():
    cfg = ConfigContainer()
    cfg.model.context_parallel_size = 2
    alignment = 2 * cfg.model.context_parallel_size
    cfg.dataset.pad = alignment
    cfg.model.tensor_model_parallel_size = TP
    cfg.model.pipeline_model_parallel_layout = LAYOUT
    return cfg
"#;
    let (tree, gaps) = settings(source, "r");
    assert_eq!(tree["dataset"]["pad"], json!(4));
    assert_eq!(tree["model"]["tensor_model_parallel_size"], json!(4));
    assert!(tree["model"]
        .get("pipeline_model_parallel_layout")
        .is_none());
    let (key, why) = gaps
        .iter()
        .find(|(k, _)| k.starts_with("model.pipeline_model_parallel_layout"))
        .unwrap();
    assert!(why.contains("join"), "{key}: {why}");
}

#[test]
fn unknown_recipe_names_the_closest() {
    let file = RecipeFile::parse(WORKLOAD_CONSTANTS).unwrap();
    let err = file
        .settings("DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BF16_V2")
        .unwrap_err();
    match &err {
        PythonRecipeError::UnknownRecipe { closest, .. } => {
            assert_eq!(closest[0], "DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BF16_V1");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("did you mean"), "{err}");
    let none = file.settings("zzz").unwrap_err().to_string();
    assert!(
        none.contains("it defines `BASE_DEEPSEEK_V3_CONFIG`"),
        "{none}"
    );
}

#[test]
fn syntax_errors_name_the_line() {
    let err = RecipeFile::parse("def r():\n    cfg = X(\n    return cfg\n\nY = 1\n").unwrap_err();
    match err {
        PythonRecipeError::Syntax { line, .. } => assert!((2..=5).contains(&line), "{line}"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn recursion_and_cycles_end_with_a_reason() {
    let source = "A = replace(B, x=1)\nB = replace(A, y=2)\ndef f():\n    return f()\n";
    let (tree, gaps) = settings(source, "A");
    assert_eq!(tree["x"], json!(1));
    assert!(
        gaps.iter().any(|(_, r)| r.contains("refers to itself")),
        "{gaps:?}"
    );
    let (_, gaps) = settings(source, "f");
    assert!(
        gaps.iter().any(|(_, r)| r.contains("calls itself")),
        "{gaps:?}"
    );
    let deep = format!("X = {}1{}\n", "(".repeat(5000), ")".repeat(5000));
    let (_, gaps) = settings(&deep, "X");
    assert!(
        gaps.iter().any(|(_, r)| r.contains("too deeply")),
        "{gaps:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        if let Ok(file) = RecipeFile::parse(&text) {
            for span in file.recipes() {
                let _ = file.settings(&span.name);
                let _ = file.recipe_at_line(span.start_line);
            }
        }
    }

    #[test]
    fn recipe_shaped_text_never_panics(
        lines in prop::collection::vec(
            prop::sample::select(vec![
                "    cfg.model.x = 1", "    cfg.model.x += 2", "    cfg = base()", "    if flag:",
                "        cfg.train.y = None", "    else:", "        cfg.y = [1, (2, 3)]",
                "    return cfg", "    helper(cfg)", "    cfg.a, cfg.b = f()", "    for i in x:",
                "    cfg.m = 2 ** 64 * 3", "    cfg.s = \"t\" * 999999", "    cfg.d = {**A, 'k': -1}",
                "def helper(cfg, flag=True):", "def r(flag: bool = False):", "A = replace(A, z=1)",
                "B = replace(A, q=torch.float32)", "    cfg.z = 7 // 0", "    x = cfg.model.x",
            ]),
            0..24,
        )
    ) {
        let text = lines.join("\n");
        if let Ok(file) = RecipeFile::parse(&text) {
            for span in file.recipes() {
                let _ = file.settings(&span.name);
            }
        }
    }
}

/// The binary on a whole performance-recipe file: the names say what the lines do not, the
/// answer lists where each came from, and a flag beside the file wins.
#[test]
fn check_reads_a_performance_recipe_file_with_its_names() {
    let path =
        std::env::temp_dir().join(format!("moe-skills-perf-recipe-{}.py", std::process::id()));
    std::fs::write(&path, PERF_PRECISION).expect("write the recipe");
    let run = |extra: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_moe-skills"))
            .args(["--json", "check", "--config"])
            .arg(&path)
            .args(["--recipe", "gpt_oss_120b_pretrain_64gpu_b300_fp8mx_config"])
            .args(["--seq-length", "4096"])
            .args(extra)
            .output()
            .expect("run moe-skills");
        let stdout = String::from_utf8_lossy(&output.stdout);
        serde_json::from_str::<serde_json::Value>(&stdout)
            .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&output.stderr)))
    };
    let body = run(&[]);
    let assumed: Vec<&str> = body["assumed_defaults"]
        .as_array()
        .expect("assumed defaults")
        .iter()
        .filter_map(|a| a["key"].as_str())
        .collect();
    for key in ["model", "num_gpus", "hardware"] {
        assert!(assumed.contains(&key), "{key} not listed: {assumed:?}");
    }
    assert_eq!(body["layout"]["num_gpus"], 64, "{}", body["layout"]);
    assert_eq!(body["layout"]["precision"], "mxfp8", "{}", body["layout"]);
    let beside = run(&["--num-gpus", "128"]);
    assert_eq!(beside["layout"]["num_gpus"], 128);
    for list in ["ignored_settings", "assumed_defaults"] {
        let keys = beside[list].as_array().expect(list);
        assert!(
            keys.iter().all(|a| a["key"] != "num_gpus"),
            "{list}: {keys:?}"
        );
    }
    let _ = std::fs::remove_file(&path);
}

// Mirrors the library recipes of Megatron-Bridge 067f987df (src/megatron/bridge/recipes/qwen/
// h100/qwen3_moe.py and gb200/qwen35.py): the model built from a HuggingFace checkpoint, the
// deprecated `cuda_graph_scope = "full"`, Bridge's CUDA-graph setters, a section switched off
// with None, and a PEFT recipe.
const LIBRARY_RECIPES: &str = r#"
from megatron.bridge.utils.cuda_graph import set_cuda_graph_modules, set_full_iteration_cuda_graph

_QWEN35_BASE = "Qwen/Qwen3.5-35B-A3B-Base"


def qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config() -> ConfigContainer:
    cfg = _pretrain_common()
    cfg.model = AutoBridge.from_hf_pretrained("Qwen/Qwen3-30B-A3B").to_megatron_provider(load_weights=False)
    cfg.model.seq_length = 4096
    cfg.model.expert_model_parallel_size = 8
    cfg.model.cuda_graph_impl = "none"
    cfg.model.cuda_graph_scope = "full"
    cfg.train.global_batch_size = 512
    cfg.train.micro_batch_size = 1
    return cfg


def qwen3_30b_a3b_sft_8gpu_h100_bf16_config() -> ConfigContainer:
    cfg = qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config()
    cfg.model.cuda_graph_impl = "transformer_engine"
    set_cuda_graph_modules(cfg.model, ["attn", "moe_router", "moe_preprocess"])
    cfg.comm_overlap = None
    return cfg


def qwen3_30b_a3b_pretrain_8gpu_gb200_bf16_config() -> ConfigContainer:
    cfg = qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config()
    set_full_iteration_cuda_graph(cfg.model)
    return cfg


def qwen35_text_35b_a3b_pretrain_8gpu_gb200_bf16_config() -> ConfigContainer:
    cfg = _pretrain_common()
    text_config = AutoConfig.from_pretrained(_QWEN35_BASE).text_config
    cfg.model = AutoBridge.from_hf_config(text_config).to_megatron_provider(load_weights=False)
    cfg.model.seq_length = 4096
    cfg.model.expert_model_parallel_size = 8
    return cfg


def qwen3_30b_a3b_peft_4gpu_h100_bf16_config(peft_scheme="lora") -> ConfigContainer:
    cfg = _peft_common()
    cfg.model = AutoBridge.from_hf_pretrained("Qwen/Qwen3-30B-A3B").to_megatron_provider(load_weights=False)
    cfg.model.tensor_model_parallel_size = 4
    cfg.model.expert_model_parallel_size = 4
    cfg.model.seq_length = 2048
    cfg.peft = default_peft_config(peft_scheme)
    return cfg


def qwen3_next_80b_a3b_peft_1gpu_h100_bf16_config(peft_scheme="lora") -> ConfigContainer:
    raise NotImplementedError("PEFT is not currently supported for Qwen3-Next models.")
"#;

fn library_config(recipe: &str) -> moe_skills::model::config::TrainingConfig {
    use moe_skills::inputs::source::{read_config_source, ConfigSource};
    read_config_source(&ConfigSource::Text(LIBRARY_RECIPES.into()), Some(recipe))
        .unwrap_or_else(|e| panic!("{recipe}: {e}"))
}

#[test]
fn library_recipes_name_their_checkpoint_and_graph_scopes() {
    use moe_skills::model::config::{CudaGraphImpl, CudaGraphScope, ModelSpec};
    let base = library_config("qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config");
    assert_eq!(
        base.model,
        Some(ModelSpec::Id("Qwen/Qwen3-30B-A3B".into())),
        "the checkpoint names the model"
    );
    assert_eq!(
        base.cuda_graph_scope,
        Some(Vec::new()),
        "\"full\" is whole layers"
    );
    assert_eq!(base.num_gpus, Some(8));
    assert_eq!(base.peft, None);

    let sft = library_config("qwen3_30b_a3b_sft_8gpu_h100_bf16_config");
    assert_eq!(
        sft.cuda_graph_scope,
        Some(vec![
            CudaGraphScope::Attn,
            CudaGraphScope::MoeRouter,
            CudaGraphScope::MoePreprocess
        ])
    );
    assert!(
        sft.ignored_settings.iter().any(|i| i.key == "comm_overlap"),
        "a section set to None is reported, not refused: {:?}",
        sft.ignored_settings
    );

    let full = library_config("qwen3_30b_a3b_pretrain_8gpu_gb200_bf16_config");
    assert_eq!(full.cuda_graph_impl, Some(CudaGraphImpl::FullIteration));
    assert_eq!(full.cuda_graph_scope, Some(Vec::new()));

    let text = library_config("qwen35_text_35b_a3b_pretrain_8gpu_gb200_bf16_config");
    assert_eq!(
        text.model,
        Some(ModelSpec::Id("Qwen/Qwen3.5-35B-A3B-Base".into()))
    );
}

#[test]
fn a_peft_recipe_freezes_the_base_weights_and_a_raising_recipe_is_refused() {
    let peft = library_config("qwen3_30b_a3b_peft_4gpu_h100_bf16_config");
    assert_eq!(peft.peft, Some(true));
    assert!(peft.frozen_base_weights());

    use moe_skills::inputs::source::{read_config_source, ConfigSource};
    let err = read_config_source(
        &ConfigSource::Text(LIBRARY_RECIPES.into()),
        Some("qwen3_next_80b_a3b_peft_1gpu_h100_bf16_config"),
    )
    .expect_err("a recipe that raises has no configuration");
    assert!(err.to_string().contains("NotImplementedError"), "{err}");
}

// Mirrors src/megatron/bridge/perf_recipes/qwen/b200/qwen3_moe.py (Bridge 067f987df): a scaled
// recipe wraps a recipe of the same file in the imported `_with_global_batch_size` helper.
#[test]
fn the_global_batch_size_helper_sets_its_size_on_the_recipe_it_wraps() {
    let source = r#"
from megatron.bridge.perf_recipes.qwen.common import _with_global_batch_size, qwen3_30b_a3b_pretrain_config


def qwen3_30b_a3b_pretrain_8gpu_b200_bf16_config() -> ConfigContainer:
    cfg = qwen3_30b_a3b_pretrain_config()
    cfg.model.expert_model_parallel_size = 8
    cfg.train.global_batch_size = 512
    return cfg


def qwen3_30b_a3b_pretrain_64gpu_b200_bf16_config() -> ConfigContainer:
    cfg = _with_global_batch_size(qwen3_30b_a3b_pretrain_8gpu_b200_bf16_config(), 4096)
    return cfg
"#;
    let (tree, _) = settings(source, "qwen3_30b_a3b_pretrain_64gpu_b200_bf16_config");
    assert_eq!(tree["train"]["global_batch_size"], json!(4096));
    assert_eq!(tree["model"]["expert_model_parallel_size"], json!(8));
}

/// Dicts keyed by tuples and subscript reads, as Bridge's DeepSeek-V3 layout helper uses them
/// (`layout_map[(pp_size, vp_size)]` over a table of list-of-lists layouts built with `+` and
/// `*`, guarded by `in`).
const TUPLE_KEYED_LAYOUTS: &str = r#"
def _layout_for(pp, vp, mtp=1):
    tail = ["mtp"] * mtp + ["loss"]
    table = {
        (1, 1): None,
        (4, 1): [["embedding"] + ["decoder"] * 2, ["decoder"] * 2, ["decoder"] * 2, ["decoder"] + tail],
        (2, 2): [["embedding"] + ["decoder"] * 2] + [["decoder"] * 2] * 2 + [["decoder"] + tail],
    }
    key = (pp, 1 if vp is None else vp)
    if key not in table:
        raise ValueError(f"no layout for {key}")
    return table[key]


def four_stages():
    cfg = ConfigContainer(model=GPTModelProvider(pipeline_model_parallel_size=4))
    cfg.model.pipeline_model_parallel_layout = _layout_for(cfg.model.pipeline_model_parallel_size, None)
    cfg.model.seq_length = [1024, 2048, 4096][-1]
    cfg.model.num_layers = {"a": 61}["a"]
    return cfg


def interleaved():
    cfg = ConfigContainer(model=GPTModelProvider())
    cfg.model.pipeline_model_parallel_layout = _layout_for(2, 2, mtp=0)
    return cfg


def single_stage():
    cfg = ConfigContainer(model=GPTModelProvider(pipeline_model_parallel_size=1))
    cfg.model.pipeline_model_parallel_layout = _layout_for(cfg.model.pipeline_model_parallel_size, None)
    return cfg


def unknown_shape():
    cfg = ConfigContainer(model=GPTModelProvider())
    cfg.model.pipeline_model_parallel_layout = {(4, 1): "x"}[(8, 1)]
    return cfg
"#;

#[test]
fn tuple_keyed_dicts_and_subscripts_are_read() {
    let (tree, gaps) = settings(TUPLE_KEYED_LAYOUTS, "four_stages");
    assert_eq!(
        tree["model"]["pipeline_model_parallel_layout"],
        json!([
            ["embedding", "decoder", "decoder"],
            ["decoder", "decoder"],
            ["decoder", "decoder"],
            ["decoder", "mtp", "loss"]
        ]),
        "{gaps:?}"
    );
    assert_eq!(tree["model"]["seq_length"], 4096);
    assert_eq!(tree["model"]["num_layers"], 61);
    let (tree, _) = settings(TUPLE_KEYED_LAYOUTS, "interleaved");
    assert_eq!(
        tree["model"]["pipeline_model_parallel_layout"],
        json!([
            ["embedding", "decoder", "decoder"],
            ["decoder", "decoder"],
            ["decoder", "decoder"],
            ["decoder", "loss"]
        ])
    );
    // `return table[key]` holding None returns None (not the function's first argument).
    let (tree, _) = settings(TUPLE_KEYED_LAYOUTS, "single_stage");
    assert_eq!(tree["model"]["pipeline_model_parallel_layout"], json!(null));
    // A key the dict does not hold is Python's KeyError: listed, not guessed.
    let (tree, gaps) = settings(TUPLE_KEYED_LAYOUTS, "unknown_shape");
    assert!(tree["model"]
        .get("pipeline_model_parallel_layout")
        .is_none());
    assert!(
        gaps.iter()
            .any(|(key, why)| key.contains("pipeline_model_parallel_layout")
                && why.contains("KeyError")),
        "{gaps:?}"
    );
}

/// The calls a recipe makes to functions defined in other files are named from the reader's
/// own notes; a class's defaults are not a call.
#[test]
fn calls_to_other_files_are_named_from_the_notes() {
    let source = r#"
def recipe():
    cfg = base_config()
    helper(cfg)
    cfg.model = GPTModelProvider(tensor_model_parallel_size=2)
    return cfg
"#;
    let (_, gaps) = settings(source, "recipe");
    let mut callees: Vec<&str> = gaps
        .iter()
        .filter_map(|(_, why)| moe_skills::inputs::python_recipe::callee_defined_outside(why))
        .collect();
    callees.sort();
    callees.dedup();
    assert_eq!(callees, ["base_config", "helper"], "{gaps:?}");
    assert!(
        gaps.iter().any(|(_, why)| why.contains("GPTModelProvider")),
        "{gaps:?}"
    );
}

// Mirrors src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py and recipes/qwen/h100/
// qwen3_moe.py with perf_recipes/qwen/h100/qwen3_moe.py (Megatron-Bridge 79308d0d, 3a9559f0):
// the library recipe sets `alltoall` with a flex backend and ends with Bridge's
// `apply_flex_dispatcher_backend`, which switches the dispatcher to `flex`; it also sets
// `cfg.model.moe_a2a_overlap`, an attribute nothing reads, before the performance recipe turns
// the expert-parallel overlap on in `comm_overlap`.
const FLEX_DISPATCHER_RECIPES: &str = r#"
from megatron.bridge.training.flex_dispatcher_backend import apply_flex_dispatcher_backend


def deepseek_v3_pretrain_1024gpu_h100_bf16_config() -> ConfigContainer:
    cfg = _pretrain_common()
    cfg.model = AutoBridge.from_hf_pretrained("deepseek-ai/DeepSeek-V3").to_megatron_provider(load_weights=False)
    cfg.model.seq_length = 4096
    cfg.model.expert_model_parallel_size = 64
    # Note: moe_token_dispatcher_type may be overridden by apply_flex_dispatcher_backend at the end
    cfg.model.moe_token_dispatcher_type = "alltoall"
    cfg.model.moe_flex_dispatcher_backend = "hybridep"
    cfg.model.moe_a2a_overlap = False
    cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    apply_flex_dispatcher_backend(cfg.model, cfg.model.moe_flex_dispatcher_backend)
    return cfg


def deepseek_v3_perf_config() -> ConfigContainer:
    cfg = deepseek_v3_pretrain_1024gpu_h100_bf16_config()
    cfg.comm_overlap.overlap_moe_expert_parallel_comm = True
    return cfg


def deepseek_v3_deepep_config() -> ConfigContainer:
    cfg = deepseek_v3_pretrain_1024gpu_h100_bf16_config()
    cfg.model.moe_token_dispatcher_type = "alltoall"
    apply_flex_dispatcher_backend(cfg.model, moe_flex_dispatcher_backend="deepep")
    return cfg


def deepseek_v3_pretrain_256gpu_gb200_bf16_config() -> ConfigContainer:
    cfg = deepseek_v3_pretrain_1024gpu_h100_bf16_config()
    apply_flex_dispatcher_backend(cfg.model, "deepep")
    return cfg


def deepseek_v3_no_backend_config() -> ConfigContainer:
    cfg = deepseek_v3_pretrain_1024gpu_h100_bf16_config()
    cfg.model.moe_token_dispatcher_type = "alltoall"
    apply_flex_dispatcher_backend(cfg.model, None)
    return cfg
"#;

fn flex_config(recipe: &str) -> moe_skills::model::config::TrainingConfig {
    use moe_skills::inputs::source::{read_config_source, ConfigSource};
    read_config_source(
        &ConfigSource::Text(FLEX_DISPATCHER_RECIPES.into()),
        Some(recipe),
    )
    .unwrap_or_else(|e| panic!("{recipe}: {e}"))
}

#[test]
fn bridges_flex_dispatcher_helper_switches_the_dispatcher_to_flex() {
    use moe_skills::model::config::{FlexBackend, TokenDispatcher};
    let c = flex_config("deepseek_v3_pretrain_1024gpu_h100_bf16_config");
    assert_eq!(c.moe_token_dispatcher_type, Some(TokenDispatcher::Flex));
    assert_eq!(c.moe_flex_dispatcher_backend, Some(FlexBackend::Hybridep));
    // The backend given by keyword; DeepEP's GPU fallback is said.
    let c = flex_config("deepseek_v3_deepep_config");
    assert_eq!(c.moe_token_dispatcher_type, Some(TokenDispatcher::Flex));
    assert_eq!(c.moe_flex_dispatcher_backend, Some(FlexBackend::Deepep));
    assert!(
        c.assumed_defaults
            .iter()
            .any(|a| a.why.contains("falls back to alltoall on GB200 and GB300")),
        "{:?}",
        c.assumed_defaults
    );
    // Where the recipe's name gives a GPU DeepEP does not run on, Bridge's fallback applies.
    let c = flex_config("deepseek_v3_pretrain_256gpu_gb200_bf16_config");
    assert_eq!(c.hardware.as_deref(), Some("gb200"));
    assert_eq!(c.moe_token_dispatcher_type, Some(TokenDispatcher::Alltoall));
    assert_eq!(c.moe_flex_dispatcher_backend, None);
    // No backend: the helper changes nothing.
    let c = flex_config("deepseek_v3_no_backend_config");
    assert_eq!(c.moe_token_dispatcher_type, Some(TokenDispatcher::Alltoall));
}

#[test]
fn the_models_moe_a2a_overlap_attribute_leaves_the_recipes_overlap_setting() {
    let base = flex_config("deepseek_v3_pretrain_1024gpu_h100_bf16_config");
    assert_eq!(base.overlap_moe_expert_parallel_comm, None);
    let perf = flex_config("deepseek_v3_perf_config");
    assert_eq!(perf.overlap_moe_expert_parallel_comm, Some(true));
    assert!(perf
        .ignored_settings
        .iter()
        .any(|i| i.key == "model.moe_a2a_overlap"));
}

// Bridge's compatibility modules re-export recipes under their legacy names
// (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py, Megatron-Bridge a8038f6d: `from
// megatron.bridge.recipes.gpt_oss.h100.gpt_oss import gpt_oss_120b_pretrain_64gpu_h100_bf16_config
// as gpt_oss_120b_pretrain_config`).
#[test]
fn a_recipe_the_file_re_exports_is_read_where_it_is_defined() {
    let dir = std::env::temp_dir().join(format!("moe-skills-reexport-{}", std::process::id()));
    let pkg = dir.join("src/megatron/bridge/recipes/gpt_oss");
    std::fs::create_dir_all(pkg.join("h100")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        pkg.join("gpt_oss.py"),
        "from megatron.bridge.recipes.gpt_oss.h100.gpt_oss import (\n    \
         gpt_oss_120b_pretrain_64gpu_h100_bf16_config as gpt_oss_120b_pretrain_config,\n)\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        pkg.join("h100/gpt_oss.py"),
        "def gpt_oss_120b_pretrain_64gpu_h100_bf16_config():\n    cfg = _pretrain_common()\n    \
         cfg.model.expert_model_parallel_size = 8\n    cfg.model.pipeline_model_parallel_size = 4\n    \
         cfg.model.seq_length = 4096\n    cfg.train.global_batch_size = 512\n    return cfg\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let path = pkg.join("gpt_oss.py");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_moe-skills"))
        .args(["--json", "check", "--config"])
        .arg(&path)
        .args(["--recipe", "gpt_oss_120b_pretrain_config"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let body: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout} {}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(body["layout"]["ep"], 8, "{}", body["layout"]);
    assert_eq!(body["layout"]["pp"], 4, "{}", body["layout"]);
    assert_eq!(body["layout"]["num_gpus"], 64, "from the recipe's name");
    assert_eq!(body["layout"]["global_batch_size"], 512);
    // The text alone cannot follow the import, and says where the recipe lives.
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let err =
        moe_skills::inputs::source::read_config_text(&text, Some("gpt_oss_120b_pretrain_config"))
            .err()
            .unwrap_or_else(|| panic!("read an imported recipe without its module"))
            .to_string();
    assert!(
        err.contains("imports `gpt_oss_120b_pretrain_config`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// Mirrors scripts/performance/configs/llama/llama3_workload_base_configs.py (Bridge v0.5.0):
// the performance launcher switches whole-layer offloading on for a layer count above 0
// (scripts/performance/utils/overrides.py), which a performance config's field therefore means.
#[test]
fn a_performance_configs_offloaded_layers_switch_whole_layer_offloading_on() {
    const LLAMA: &str = r#"
from dataclasses import replace

BASE_LLAMA3_70B_CONFIG_GBS256 = WorkloadBaseConfig(
    num_gpus=64,
    global_batch_size=256,
)

LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 = replace(
    BASE_LLAMA3_70B_CONFIG_GBS256,
    micro_batch_size=2,
    use_megatron_fsdp=True,
    cpu_offloading_num_layers=40,
)

LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 = replace(
    BASE_LLAMA3_70B_CONFIG_GBS256,
    tensor_model_parallel_size=2,
)
"#;
    let (offloading, _) = settings(LLAMA, "LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2");
    assert_eq!(offloading["cpu_offloading_num_layers"], json!(40));
    assert_eq!(offloading["cpu_offloading"], json!(true));
    let (plain, _) = settings(LLAMA, "LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_MX_V2");
    assert!(plain.get("cpu_offloading").is_none(), "{plain}");
    // A Megatron-Core config's own field means what Megatron-Core makes of it: nothing alone.
    let (core, _) = settings(
        "def r():\n    cfg = base()\n    cfg.model.cpu_offloading_num_layers = 4\n    return cfg\n",
        "r",
    );
    assert!(core["model"].get("cpu_offloading").is_none(), "{core}");
}
