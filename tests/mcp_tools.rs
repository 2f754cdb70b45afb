//! The cost-model tools through the built binary: over stdio and streamable HTTP with rmcp's
//! client (happy paths, `isError` results for bad input), and the CLI with `--json`.

mod mcp_support;

use mcp_support::{call, spawn_http, stdio_client, Client, BIN};
use rmcp::model::{CallToolResult, GetPromptRequestParams};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use serde_json::{json, Value};

const COMPUTE_TOOLS: [&str; 9] = [
    "compare_with_log",
    "size_cp",
    "lookup_recipe",
    "choose_recompute",
    "check_feasibility",
    "plan_layouts",
    "triage_oom",
    "list_models",
    "list_hardware",
];

/// The structured answer of a successful call, after checking that its one text block is
/// the Markdown a person reads (the rationale, or a table for the listings), not the JSON.
fn structured(result: &CallToolResult) -> &Value {
    assert_ne!(result.is_error, Some(true), "{:?}", result.content);
    let body = result
        .structured_content
        .as_ref()
        .expect("structured content");
    let [block] = result.content.as_slice() else {
        panic!("expected one text block: {:?}", result.content);
    };
    let text = &block.as_text().expect("a text block").text;
    assert!(!text.trim_start().starts_with('{'), "JSON as text: {text}");
    match body.get("rationale").and_then(Value::as_str) {
        Some(rationale) => {
            let first = rationale.lines().next().expect("a rationale");
            assert!(!first.is_empty() && text.starts_with(first), "{text}");
        }
        None => assert!(text.contains("|---|"), "not a Markdown table: {text}"),
    }
    body
}

fn error_text(result: &CallToolResult) -> String {
    assert_eq!(
        result.is_error,
        Some(true),
        "expected a tool error: {result:?}"
    );
    serde_json::to_string(&result.content).expect("content")
}

fn qwen3_235b_128k() -> Value {
    json!({
        "model": "qwen3-235b-a22b", "hardware": "h100", "num_gpus": 256, "seq_length": 131072,
        "precision": "bf16", "tp": 4, "cp": 8, "pp": 8, "vpp": 4, "ep": 8,
        "sequence_parallel": true, "global_batch_size": 32,
        "recompute_granularity": "selective", "recompute_modules": ["layernorm", "moe"]
    })
}

/// Every tool once, happy path and error path, on one connection.
async fn exercise(client: &Client) {
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    for name in ["recipe", "triage", "log"] {
        assert!(
            prompts.iter().any(|p| p.name == name),
            "prompt {name} missing"
        );
    }
    let mut arguments = serde_json::Map::new();
    arguments.insert("model".into(), json!("deepseek-v3"));
    arguments.insert("seq_length".into(), json!("262144"));
    let recipe = client
        .get_prompt(GetPromptRequestParams::new("recipe").with_arguments(arguments))
        .await
        .expect("prompts/get recipe");
    let text = serde_json::to_string(&recipe.messages).expect("messages");
    assert!(
        text.contains("lookup_recipe") && text.contains("deepseek-v3"),
        "{text}"
    );
    let missing = client
        .get_prompt(GetPromptRequestParams::new("recipe"))
        .await
        .expect_err("model is required");
    assert!(missing.to_string().contains("model"), "{missing}");

    let tools = client.list_all_tools().await.expect("tools/list");
    for name in COMPUTE_TOOLS {
        let tool = tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("tool {name} missing"));
        assert!(tool.output_schema.is_some(), "{name} has no output schema");
        let annotations = tool.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.read_only_hint, Some(true), "{name}");
        assert_eq!(annotations.idempotent_hint, Some(true), "{name}");
    }

    let out = call(client, "list_models", json!({})).await;
    assert!(structured(&out)["models"]
        .as_array()
        .is_some_and(|m| m.len() >= 11));
    let out = call(client, "list_hardware", json!({})).await;
    assert!(structured(&out)["hardware"]
        .as_array()
        .is_some_and(|h| h.len() >= 6));

    let out = call(
        client,
        "lookup_recipe",
        json!({"model": "deepseek-v3", "seq_length": 262144, "hardware": "h100"}),
    )
    .await;
    let best = &structured(&out)["recipes"][0];
    assert_eq!(best["id"], "dsv3-256k-h100");
    assert_eq!(best["config"]["context_parallel_size"], 64);
    assert!(best["predicted"]["peak_gib"].as_f64().is_some());
    let out = call(
        client,
        "lookup_recipe",
        json!({"model": "gpt-9", "seq_length": 4096}),
    )
    .await;
    assert!(error_text(&out).contains("model"));

    let out = call(
        client,
        "size_cp",
        json!({"model": "deepseek-v3", "seq_length": 131072, "hardware": "h100", "num_gpus": 256}),
    )
    .await;
    let body = structured(&out);
    assert!(body["context_parallel_size"].as_u64().is_some());
    assert!(body["alternatives"]
        .as_array()
        .is_some_and(|a| !a.is_empty()));
    let out = call(
        client,
        "size_cp",
        json!({"model": "deepseek-v3", "seq_length": 131072, "hardware": "h100", "num_gpus": 0}),
    )
    .await;
    assert!(error_text(&out).contains("num_gpus"));

    let out = call(client, "check_feasibility", qwen3_235b_128k()).await;
    let body = structured(&out);
    for key in [
        "fits",
        "violations",
        "memory",
        "performance",
        "flops",
        "rationale",
        "citations",
        "walls",
    ] {
        assert!(body.get(key).is_some(), "check_feasibility lacks {key}");
    }
    // A run whose overlap schedule is CPU-bound says where its time goes and what to compare.
    let intra_node = json!({
        "model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 8, "seq_length": 4096,
        "precision": "fp8-tensorwise", "ep": 8, "global_batch_size": 256,
        "overlap_moe_expert_parallel_comm": true
    });
    let out = call(client, "check_feasibility", intra_node).await;
    let body = structured(&out);
    assert!(
        body["performance"]["uncertainty"]["typical_abs_error"].is_number(),
        "{}",
        body["performance"]["uncertainty"]
    );
    // The quoted range is where the band's runs measured, for throughput and step time, and
    // stays finite whatever the band holds.
    let perf = &body["performance"];
    let u = &perf["uncertainty"];
    let number = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    let (low, high) = (number(&u["tflops_low"]), number(&u["tflops_high"]));
    let tflops = number(&perf["model_tflops_per_gpu"]);
    assert!(low.is_finite() && high.is_finite() && low <= high, "{u}");
    let ratio_low = number(&u["measured_ratio_low"]);
    assert!(
        (low - tflops * ratio_low).abs() <= 1e-6 * tflops.max(1.0),
        "{u}"
    );
    let (step_low, step_high) = (
        number(&u["step_time_low_s"]),
        number(&u["step_time_high_s"]),
    );
    let step = number(&perf["step_time_s"]);
    assert!(step_low <= step_high && step_low > 0.0, "{u}");
    assert!(
        (step_high - step / ratio_low).abs() <= 1e-3 * step.max(1.0),
        "{u}"
    );
    let rationale = body["rationale"].as_str().expect("rationale");
    assert!(rationale.contains("inside one node"), "{rationale}");
    assert!(
        rationale.contains("their prediction:") && rationale.contains("s by the same runs)"),
        "{rationale}"
    );
    assert!(rationale.contains("#1760"), "{rationale}");
    // A sequence far past every measured run of its band says so, in JSON and in words.
    let mut million = qwen3_235b_128k();
    million["seq_length"] = json!(1_048_576);
    million["cp"] = json!(32);
    million["num_gpus"] = json!(1024);
    let out = call(client, "check_feasibility", million).await;
    let body = structured(&out);
    let beyond = &body["performance"]["uncertainty"]["beyond_measured"];
    let seq = beyond
        .as_array()
        .and_then(|b| b.iter().find(|x| x["quantity"] == "seq_length"))
        .unwrap_or_else(|| panic!("no seq_length in {beyond}"));
    assert_eq!(seq["run"], 1_048_576, "{seq}");
    assert!(
        seq["largest_measured"]
            .as_u64()
            .is_some_and(|l| l < 1_048_576),
        "{seq}"
    );
    let rationale = body["rationale"].as_str().expect("rationale");
    assert!(
        rationale.contains("past those runs: a 1M sequence"),
        "{rationale}"
    );
    let mut bad = qwen3_235b_128k();
    bad["tensor_model_parallel_size"] = json!(-2);
    let out = call(client, "check_feasibility", bad).await;
    assert!(error_text(&out).contains("tensor_model_parallel_size"));
    let out = call(
        client,
        "size_cp",
        json!({"model": "deepseek-v3", "seq_length": -5, "num_gpus": 8}),
    )
    .await;
    assert!(error_text(&out).contains("seq_length"));
    let out = call(
        client,
        "choose_recompute",
        json!({"config": {"model": "deepseek-v3", "pp": -1}}),
    )
    .await;
    assert!(error_text(&out).contains("config.pp"));

    let mut no_recompute = qwen3_235b_128k();
    no_recompute["recompute_granularity"] = Value::Null;
    no_recompute["recompute_modules"] = Value::Null;
    let out = call(
        client,
        "choose_recompute",
        json!({"config": no_recompute.clone(), "memory_budget_gib": 78}),
    )
    .await;
    let body = structured(&out);
    assert!(body["peak_gib"].as_f64().is_some());
    assert!(body["time_overhead_pct"].as_f64().is_some());
    let out = call(
        client,
        "choose_recompute",
        json!({"config": no_recompute.clone(), "memory_budget_gib": 0}),
    )
    .await;
    assert!(error_text(&out).contains("memory_budget_gib"));

    let out = call(
        client,
        "plan_layouts",
        json!({"model": "qwen3-30b-a3b", "hardware": "h100", "num_gpus": 16, "seq_length": 32768, "top_k": 3}),
    )
    .await;
    let body = structured(&out);
    assert!(body["candidates"].as_array().is_some_and(|c| !c.is_empty()));
    assert!(body["considered"].as_u64().is_some_and(|n| n > 0));
    let out = call(
        client,
        "plan_layouts",
        json!({"model": "qwen3-30b-a3b", "hardware": "tpu-v5", "num_gpus": 16, "seq_length": 32768}),
    )
    .await;
    assert!(error_text(&out).contains("hardware"));

    let out = call(
        client,
        "triage_oom",
        json!({"before": qwen3_235b_128k(), "after": no_recompute}),
    )
    .await;
    let body = structured(&out);
    assert_eq!(body["after"]["fits"], false);
    assert!(body["causes"][0]["field"]
        .as_str()
        .is_some_and(|f| f.starts_with("recompute")));
    let out = call(client, "triage_oom", json!({"before": qwen3_235b_128k()})).await;
    assert!(error_text(&out).contains("after"));

    // A log: its argument dump is the configuration; the answer sets what it measured beside
    // the prediction, in the JSON and in the Markdown text.
    let log = std::fs::read_to_string(mcp_support::fixture("logs/qwen3-30b-a3b-32k-32gpu.log"))
        .expect("fixture log");
    let out = call(
        client,
        "compare_with_log",
        json!({"log": log, "hardware": "h100", "model": "qwen3-30b-a3b"}),
    )
    .await;
    let body = structured(&out);
    assert_eq!(body["check"]["layout"]["cp"], 2, "{body}");
    assert_eq!(
        body["comparison"]["memory"].as_array().map(Vec::len),
        Some(2)
    );
    assert!(body["comparison"]["steps"]["median_step_ms"]
        .as_f64()
        .is_some_and(|ms| ms > 6000.0));
    let text = out
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<String>();
    assert!(text.contains("Measured (log) vs predicted"), "{text}");
    let out = call(
        client,
        "compare_with_log",
        json!({"log": "nothing useful here", "hardware": "h100"}),
    )
    .await;
    assert!(error_text(&out).contains("log"), "{}", error_text(&out));
    let mut arguments = serde_json::Map::new();
    arguments.insert("log".into(), json!(log));
    arguments.insert("hardware".into(), json!("h100"));
    let prompt = client
        .get_prompt(GetPromptRequestParams::new("log").with_arguments(arguments))
        .await
        .expect("prompts/get log");
    let text = serde_json::to_string(&prompt.messages).expect("messages");
    assert!(
        text.contains("compare_with_log") && text.contains("calibrate --log"),
        "{text}"
    );
}

#[tokio::test]
async fn compute_tools_over_stdio() {
    let client = stdio_client().await;
    exercise(&client).await;
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn compute_tools_over_http() {
    let server = spawn_http(&[]);
    let transport = StreamableHttpClientTransport::from_uri(server.url.as_str());
    let client = ().serve(transport).await.expect("initialize over HTTP");
    exercise(&client).await;
    client.cancel().await.expect("close");
}

fn cli(args: &[&str]) -> (bool, String, String) {
    let output = std::process::Command::new(BIN)
        .args(args)
        .env("MOE_SKILLS_LOG", "warn")
        .output()
        .expect("run moe-skills");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn cli_tools_print_the_mcp_json() {
    let (ok, out, err) = cli(&[
        "lookup-recipe",
        "--model",
        "deepseek-v3",
        "--seq-length",
        "262144",
        "--hardware",
        "h100",
        "--json",
    ]);
    assert!(ok, "{err}");
    let body: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(body["recipes"][0]["id"], "dsv3-256k-h100");

    let (ok, out, err) = cli(&[
        "check", "--megatron-args",
        "--tensor-model-parallel-size 4 --context-parallel-size 8 --pipeline-model-parallel-size 8 \
         --num-virtual-stages-per-pipeline-rank 4 --expert-model-parallel-size 8 --seq-length 131072 \
         --micro-batch-size 1 --global-batch-size 32 --sequence-parallel --bf16 \
         --recompute-granularity selective --recompute-modules layernorm moe",
        "--model", "qwen3-235b-a22b", "--hardware", "h100", "--num-gpus", "256", "--json",
    ]);
    assert!(ok, "{err}");
    let body: Value = serde_json::from_str(&out).expect("json");
    for key in ["fits", "violations", "memory", "performance", "flops"] {
        assert!(body.get(key).is_some(), "check --json lacks {key}");
    }
    assert!(body["memory"]["peak_gib"].as_f64().is_some());
    let performance = &body["performance"];
    assert_eq!(performance["mfu_peak"], "BF16", "a BF16 run");
    assert_eq!(performance["mfu"], performance["mfu_bf16"]);
    assert!(performance["mfu_peak_tflops"]
        .as_f64()
        .is_some_and(|p| p > 0.0));
    assert!(body["performance"]["model_tflops_per_gpu"]
        .as_f64()
        .is_some());
    assert!(body["flops"]["gflop_per_token"].as_f64().is_some());

    let (ok, out, _) = cli(&["models"]);
    assert!(ok);
    assert!(out.contains("deepseek-v3"));

    let (ok, _, err) = cli(&[
        "size-cp",
        "--model",
        "nope",
        "--seq-length",
        "4096",
        "--num-gpus",
        "8",
    ]);
    assert!(!ok);
    assert!(err.contains("model"), "{err}");
}

#[test]
fn a_dense_models_cli_answer_lists_no_expert_defaults_a_whole_line_filled_in() {
    // A whole pretrain_gpt.py line takes Megatron-LM's defaults for the flags it leaves out,
    // the MoE ones among them; for Llama-3-8B none of those applies, so plan-layouts lists
    // them neither as assumed nor as not taken. For a MoE model they stay.
    let notes = |model: &str| {
        let (ok, out, err) = cli(&[
            "plan-layouts",
            "--model",
            model,
            "--hardware",
            "h100",
            "--num-gpus",
            "16",
            "--seq-length",
            "8192",
            "--global-batch-size",
            "64",
            "--megatron-args",
            "pretrain_gpt.py --micro-batch-size 1 --bf16",
            "--json",
        ]);
        assert!(ok, "{err}");
        let body: Value = serde_json::from_str(&out).expect("json");
        let keys = |list: &str, field: &str| -> Vec<String> {
            body[list]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n[field].as_str().map(str::to_owned))
                .collect()
        };
        let mut all = keys("assumed_defaults", "key");
        all.extend(keys("ignored_settings", "key"));
        all
    };
    let dense = notes("llama3-8b");
    for key in [
        "moe_grouped_gemm",
        "moe_token_dispatcher_type",
        "moe_router_force_load_balancing",
    ] {
        assert!(!dense.iter().any(|k| k == key), "{key}: {dense:?}");
    }
    assert!(
        dense.iter().any(|k| k == "use_distributed_optimizer"),
        "{dense:?}"
    );
    let moe = notes("qwen3-30b-a3b");
    assert!(moe.iter().any(|k| k == "moe_grouped_gemm"), "{moe:?}");
}

/// `check_feasibility` over MCP takes the file an agent holds: a Megatron-Bridge Python recipe
/// as `config_text`, the modules it imports as `modules` (by path in the checkout), fields
/// set over it; what was sent and not used is named.
#[tokio::test]
async fn check_feasibility_reads_a_python_recipe_sent_as_text() {
    const RECIPE: &str = "\
from megatron.bridge.perf_recipes.model.common import _model_common, model_pretrain_config


def model_pretrain_16gpu_h100_bf16_config():
    cfg = model_pretrain_config()
    _model_common(cfg)
    cfg.model.expert_model_parallel_size = 16
    return cfg
";
    const COMMON: &str = "\
from megatron.bridge.recipes.model.h100.model import base_config as model_pretrain_config


def _model_common(cfg) -> None:
    cfg.model.recompute_granularity = \"selective\"
    cfg.model.recompute_modules = [\"moe\"]
";
    const BASE: &str = "\
def base_config():
    cfg = ConfigContainer(model=GPTModelProvider(), train=TrainingConfig())
    cfg.model.seq_length = 8192
    cfg.train.global_batch_size = 256
    cfg.train.micro_batch_size = 1
    return cfg
";
    let client = stdio_client().await;
    let result = call(
        &client,
        "check_feasibility",
        json!({
            "config_text": RECIPE,
            "modules": {
                "src/megatron/bridge/perf_recipes/model/common.py": COMMON,
                "src/megatron/bridge/recipes/model/h100/model.py": BASE,
                "src/megatron/bridge/unused.py": "X = 1\n",
            },
            "model": "qwen3-30b-a3b",
            "micro_batch_size": 2,
            "recompute_num_layers": null,
        }),
    )
    .await;
    let body = structured(&result);
    let layout = &body["layout"];
    // From the base recipe two modules away, the recipe itself and its name, and the field.
    assert_eq!(layout["seq_length"], 8192, "{layout}");
    assert_eq!(layout["ep"], 16, "{layout}");
    assert_eq!(layout["num_gpus"], 16, "{layout}");
    assert_eq!(layout["micro_batch_size"], 2, "{layout}");
    let ignored = body["ignored_settings"].to_string();
    assert!(
        ignored.contains("modules: src/megatron/bridge/unused.py"),
        "{ignored}"
    );
    assert!(ignored.contains("recompute_num_layers"), "{ignored}");
    // Without the modules the base recipe is not read, and the answer says which is missing.
    let result = call(
        &client,
        "check_feasibility",
        json!({"config_text": RECIPE, "model": "qwen3-30b-a3b"}),
    )
    .await;
    let text = error_text(&result);
    assert!(text.contains("does not set seq_length"), "{text}");
    assert!(
        text.contains("`model_pretrain_config`, `_model_common`"),
        "{text}"
    );
    assert!(text.contains("`modules`"), "{text}");
    client.cancel().await.expect("close");
}

/// A launch script sent as `config_text` over MCP is evaluated as bash runs it: the flags it
/// keeps in variables, arrays and `if` blocks are read, and the sbatch directives give the GPU
/// count.
#[tokio::test]
async fn check_feasibility_reads_a_launch_script_sent_as_text() {
    const SCRIPT: &str = r#"#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
EP=${EP:-16}
ARGS=(
    --seq-length 4096 --micro-batch-size 1 --global-batch-size 256
    --expert-model-parallel-size $EP
)
if [ "${USE_FP8:-0}" = 1 ]; then
    ARGS+=(--fp8-format hybrid)
else
    ARGS+=(--bf16)
fi
srun python pretrain_gpt.py "${ARGS[@]}"
"#;
    let client = stdio_client().await;
    let result = call(
        &client,
        "check_feasibility",
        json!({"config_text": SCRIPT, "model": "qwen3-30b-a3b", "hardware": "h100"}),
    )
    .await;
    let body = structured(&result);
    let layout = &body["layout"];
    assert_eq!(layout["num_gpus"], 16, "{layout}");
    assert_eq!(layout["ep"], 16, "{layout}");
    assert_eq!(layout["seq_length"], 4096, "{layout}");
    let ignored = body["ignored_settings"].to_string();
    assert!(ignored.contains("EP=16"), "{ignored}");
    client.cancel().await.expect("close");
}
