//! The cost-model tools: thin MCP adapters over `crate::tools`. Business errors (unknown
//! model, impossible layout, ...) come back as tool results with `isError: true`. Every call
//! goes through `admission.rs`: heavy ones off the async workers behind the core limit, all
//! of them under the panic guard.

use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_router, Json};

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ResourceContents};
use schemars::JsonSchema;
use serde::Serialize;

use super::SkillServer;
use crate::charts::{self, Chart};
use crate::model::TrainingConfig;
use crate::tools::common::parse_input;
use crate::tools::config_text;
use crate::tools::feasibility::{self, CheckFeasibilityOutput};
use crate::tools::listing::{self, ListHardwareOutput, ListModelsOutput};
use crate::tools::log_compare::{self, CompareWithLogInput, CompareWithLogOutput};
use crate::tools::plan::{self, PlanLayoutsInput, PlanLayoutsOutput};
use crate::tools::recipe::{self, LookupRecipeInput, LookupRecipeOutput};
use crate::tools::recompute::{self, ChooseRecomputeInput, ChooseRecomputeOutput};
use crate::tools::size_cp::{self, SizeCpInput, SizeCpOutput};
use crate::tools::triage::{self, TriageOomInput, TriageOomOutput};

/// The input schema of a typed tool input. The tools take raw JSON and deserialize it
/// themselves (`parse_input`) so that a type error names the field; the advertised schema
/// is still the typed one.
fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|error| panic!("invalid input schema for a compute tool: {error}"))
}

/// The input field that asks `check_feasibility`, `plan_layouts` and `triage_oom` for charts.
/// The server reads it and takes it out before the tool parses its input, so the tools' own
/// input types (and their `deny_unknown_fields`) stay as they are.
const CHARTS_FIELD: &str = "charts";

/// A tool's input schema plus the `charts` flag.
fn input_schema_with_charts<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut schema = (*input_schema::<T>()).clone();
    if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert(
            CHARTS_FIELD.into(),
            serde_json::json!({
                "type": "boolean",
                "default": false,
                "description": "Also return SVG charts (memory per pipeline rank against the usable capacity, the step-time breakdown; for triage, before → after waterfalls of memory and step time) as embedded resources (mimeType image/svg+xml, uri chart://<tool>/<name>.svg) after the Markdown text. Off by default: they are 5–30 KB each, which JSON-only agents need not pay for.",
            }),
        );
    }
    Arc::new(schema)
}

/// `check_feasibility`'s input: the configuration's fields, `charts`, and a file's text
/// (`config_text`, with `recipe` and `modules` for a Python recipe) the fields are set over.
fn input_schema_with_config_text() -> Arc<JsonObject> {
    let mut schema = (*input_schema_with_charts::<TrainingConfig>()).clone();
    if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
        properties.insert(
            config_text::TEXT_FIELD.into(),
            serde_json::json!({
                "type": "string",
                "description": "The text of a configuration file, read as `moe-skills check --config FILE` reads it: YAML/JSON, a Megatron-Bridge override file, Megatron-LM's `vars(args)` or a wandb run's config.yaml, a launch script, a Megatron-LM argument list or YAML run file, a Megatron-Bridge Python recipe file (name the recipe in `recipe`; send what it imports in `modules`), or a training log (its argument dump). Fields given beside it are set over what it sets.",
            }),
        );
        properties.insert(
            config_text::RECIPE_FIELD.into(),
            serde_json::json!({
                "type": "string",
                "description": "With `config_text` of a Python file that defines several recipes: the function or constant to read.",
            }),
        );
        properties.insert(
            config_text::MODULES_FIELD.into(),
            serde_json::json!({
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "With `config_text` of a Python recipe: the texts of the modules it imports, keyed by their path in the checkout (src/megatron/bridge/perf_recipes/deepseek/common.py) or dotted module name. The answer lists the modules imported but not sent.",
            }),
        );
    }
    Arc::new(schema)
}

/// Reads and removes `charts` from the arguments.
fn take_charts_flag(arguments: &mut JsonObject) -> Result<bool, String> {
    match arguments.remove(CHARTS_FIELD) {
        None | Some(serde_json::Value::Null) => Ok(false),
        Some(serde_json::Value::Bool(wanted)) => Ok(wanted),
        Some(other) => Err(crate::tools::common::ToolError::field(
            CHARTS_FIELD,
            format!(
                "expected true or false, got {}",
                crate::tools::common::clip(&other.to_string())
            ),
            "give \"charts\": true for SVG charts beside the text, or leave it out",
        )
        .to_string()),
    }
}

/// The charts appended to an answer, one embedded SVG resource each, after the text block.
fn with_charts(mut result: CallToolResult, tool: &str, charts: Vec<Chart>) -> CallToolResult {
    for chart in charts {
        let uri = chart.uri(tool);
        result.content.push(ContentBlock::resource(
            ResourceContents::text(chart.svg, uri).with_mime_type("image/svg+xml"),
        ));
    }
    result
}

/// A tool's answer as a person and a program each want it: the Markdown rationale as the text
/// block (what a host shows), the output JSON as `structuredContent` (what the output schema
/// describes). A serialized copy of the JSON in the text block would be unreadable and twice
/// the size.
fn explained<T: Serialize>(
    Json(output): Json<T>,
    markdown: impl FnOnce(&T) -> String,
) -> Result<CallToolResult, String> {
    let structured = serde_json::to_value(&output).map_err(|error| error.to_string())?;
    let mut result = CallToolResult::success(vec![ContentBlock::text(markdown(&output))]);
    result.structured_content = Some(structured);
    Ok(result)
}

#[tool_router(router = compute_tool_router, vis = "pub(crate)")]
impl SkillServer {
    #[tool(
        name = "size_cp",
        input_schema = input_schema::<SizeCpInput>(),
        output_schema = schema_for_output::<SizeCpOutput>(),
        title = "Size context parallelism",
        description = "How large context parallelism (CP) should be for a model, sequence length and GPU count. Starts from the rule of thumb CP ≈ seq/4096, then searches the other dimensions with the cost model for every power-of-two CP and returns the choice, the local sequence length, the layout behind it, and every alternative with predicted memory and throughput.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn size_cp(
        &self,
        Parameters(arguments): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let output = self
            .heavy("size_cp", move |catalog| {
                parse_input(arguments).and_then(|input| size_cp::size_cp(catalog, input))
            })
            .await?;
        explained(output, |o| o.rationale.clone())
    }

    #[tool(
        name = "lookup_recipe",
        input_schema = input_schema::<LookupRecipeInput>(),
        output_schema = schema_for_output::<LookupRecipeOutput>(),
        title = "Look up a documented recipe",
        description = "The documented long-context MoE recipes nearest to a request (model, sequence length, hardware, GPUs, precision): exact match first, then by model family, sequence and hardware. Each comes with its source, its measured numbers, the cost model's prediction and, when the request differs, an adapted layout with what changed and why.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn lookup_recipe(
        &self,
        Parameters(arguments): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let output = self
            .heavy("lookup_recipe", move |catalog| {
                parse_input(arguments).and_then(|input| recipe::lookup_recipe(catalog, input))
            })
            .await?;
        explained(output, |o| o.rationale.clone())
    }

    #[tool(
        name = "choose_recompute",
        input_schema = input_schema::<ChooseRecomputeInput>(),
        output_schema = schema_for_output::<ChooseRecomputeOutput>(),
        title = "Choose activation recompute",
        description = "The cheapest activation-recompute setting (selective module list, or full with method and layers) that fits a training configuration in a memory budget (default: the GPU's memory), with its peak memory, memory saving and step-time overhead, and the ranked alternatives.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn choose_recompute(
        &self,
        Parameters(arguments): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let output = self
            .heavy("choose_recompute", move |catalog| {
                parse_input(arguments).and_then(|input| recompute::choose_recompute(catalog, input))
            })
            .await?;
        explained(output, |o| o.rationale.clone())
    }

    #[tool(
        name = "check_feasibility",
        input_schema = input_schema_with_config_text(),
        output_schema = schema_for_output::<CheckFeasibilityOutput>(),
        title = "Check a training configuration",
        description = "Evaluate one training configuration (Megatron field names; aliases tp/pp/vpp/cp/ep/etp): layout violations with fixes, peak memory on the worst pipeline rank with a breakdown that sums to it, step time with its breakdown, model TFLOP/s per GPU, tokens/s per GPU, MFU, and which of the three walls (memory, communication, compute/host) binds.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn check_feasibility(
        &self,
        Parameters(mut arguments): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let want_charts = take_charts_flag(&mut arguments)?;
        let Json((output, charts)) = self
            .heavy("check_feasibility", move |catalog| {
                config_text::config_from_arguments(arguments).and_then(|input| {
                    let output = feasibility::check_feasibility(catalog, input.clone())?;
                    let charts = if want_charts {
                        charts::for_check(&input, &output)
                    } else {
                        Vec::new()
                    };
                    Ok((output, charts))
                })
            })
            .await?;
        explained(Json(output), |o| o.rationale.clone()).map(|r| with_charts(r, "check", charts))
    }

    #[tool(
        name = "plan_layouts",
        input_schema = input_schema_with_charts::<PlanLayoutsInput>(),
        output_schema = schema_for_output::<PlanLayoutsOutput>(),
        title = "Plan parallel layouts",
        description = "Search TP, CP, EP, PP, VPP, MBS, recompute, dispatcher, optimizer offload and sharding with the cost model and return the top layouts that fit, ranked by predicted throughput, with memory headroom and the count of layouts considered and rejected by reason.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn plan_layouts(
        &self,
        Parameters(mut arguments): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let want_charts = take_charts_flag(&mut arguments)?;
        let Json((output, charts)) = self
            .heavy("plan_layouts", move |catalog| {
                let output = parse_input::<PlanLayoutsInput>(arguments)
                    .and_then(|input| plan::plan_layouts(catalog, input))?;
                let charts = if want_charts {
                    charts::for_plan(catalog, &output)?
                } else {
                    Vec::new()
                };
                Ok::<_, crate::tools::common::ToolError>((output, charts))
            })
            .await?;
        explained(Json(output), |o| o.rationale.clone()).map(|r| with_charts(r, "plan", charts))
    }

    #[tool(
        name = "triage_oom",
        input_schema = input_schema_with_charts::<TriageOomInput>(),
        output_schema = schema_for_output::<TriageOomOutput>(),
        title = "Triage an OOM or slowdown commit",
        description = "Why a change made a long-context run go out of memory or slow down. Give `before` and `after` configurations, or `before` plus `diff` (`git show`, `git diff` or `diff -u` of launch scripts, Megatron-LM argument lists, YAML/JSON override files or Megatron-Bridge Python recipes). Each configuration may be fields or a file's text in any of those formats; `model`, `hardware` and `num_gpus` may be given beside it. When a Python diff changes several recipes, each is triaged on its own unless `recipe` names one. Returns both check summaries, the causes ranked with the memory and step-time delta each change makes alone, the per-component memory delta, and the cheapest fixes that make `after` fit again.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn triage_oom(
        &self,
        Parameters(mut arguments): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let want_charts = take_charts_flag(&mut arguments)?;
        let Json((output, charts)) = self
            .heavy("triage_oom", move |catalog| {
                let output =
                    parse_input(arguments).and_then(|input| triage::triage_oom(catalog, input))?;
                let charts = if want_charts {
                    charts::for_triage(&output)
                } else {
                    Vec::new()
                };
                Ok::<_, crate::tools::common::ToolError>((output, charts))
            })
            .await?;
        explained(Json(output), |o| o.rationale.clone()).map(|r| with_charts(r, "triage", charts))
    }

    #[tool(
        name = "compare_with_log",
        input_schema = input_schema::<CompareWithLogInput>(),
        output_schema = schema_for_output::<CompareWithLogOutput>(),
        title = "Compare a training log with the model",
        description = "Here is my log: why did it go out of memory, why is it slow? Give the text of a Megatron-LM or Megatron-Bridge training log (`log`) and the GPU (`hardware`; logs do not name it), plus `model` when the argument dump lacks the architecture. The configuration comes from the log's argument dump; the answer is the check_feasibility answer for it beside what the log measured: `max allocated` and `max reserved` per reporting rank against the model's allocated and reserved views of that pipeline stage, the steady-state step time and TFLOP/s against the prediction, the CUDA OOM message against the predicted peak, and the terms that explain each gap. For a run that worked and one that failed, call triage_oom with both logs as `before` and `after`.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn compare_with_log(
        &self,
        Parameters(arguments): Parameters<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let output = self
            .heavy("compare_with_log", move |catalog| {
                parse_input(arguments).and_then(|input| log_compare::compare_log(catalog, input))
            })
            .await?;
        explained(output, |o| o.rationale.clone())
    }

    #[tool(
        name = "list_models",
        output_schema = schema_for_output::<ListModelsOutput>(),
        title = "List model cards",
        description = "The model architectures the cost model knows (ids to use as `model`), with layers, hidden size, experts, top-k, parameters and GFLOP per token at 4K.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn list_models(&self) -> Result<CallToolResult, String> {
        explained(
            self.cheap("list_models", listing::list_models)?,
            ListModelsOutput::markdown,
        )
    }

    #[tool(
        name = "list_hardware",
        output_schema = schema_for_output::<ListHardwareOutput>(),
        title = "List hardware cards",
        description = "The GPUs the cost model knows (ids to use as `hardware`), with memory, dense peak TFLOP/s per precision, HBM and NVLink bandwidth, NVLink domain size, network bandwidth and default MoE dispatcher.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    pub async fn list_hardware(&self) -> Result<CallToolResult, String> {
        explained(
            self.cheap("list_hardware", listing::list_hardware)?,
            ListHardwareOutput::markdown,
        )
    }
}
