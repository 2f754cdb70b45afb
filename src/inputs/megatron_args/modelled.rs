//! Flags that set a training-configuration field: under another name, or through Megatron-LM's
//! own rule (recompute, precision, offloading, expert tensor parallelism, the layers per virtual
//! stage).

use super::defaults::{megatron_default, MEGATRON_DEFAULTS_OVER_RECIPES};
use super::*;

impl Reader {
    pub(super) fn apply_modelled(&mut self, given: &[Given]) -> Result<(), ConfigError> {
        for g in given {
            if megatron_use(&g.dest) != MegatronUse::Modelled {
                continue;
            }
            if g.value.first().is_some_and(is_shell_variable) {
                self.ignored.push(ignore(
                    &g.option,
                    "value is an unexpanded shell variable; expand it to model this setting",
                ));
                continue;
            }
            let scalar = |g: &Given| g.value.first().map(scalar_value).unwrap_or(Value::Null);
            let list = |g: &Given| match &g.value {
                ArgValue::Many(v) => Value::Array(v.iter().cloned().map(Value::String).collect()),
                ArgValue::One(s) => Value::Array(vec![Value::String(s.clone())]),
                ArgValue::Switch(_) => Value::Array(Vec::new()),
            };
            let switch = |g: &Given| matches!(g.value, ArgValue::Switch(true));
            match g.dest.as_str() {
                "num_virtual_stages_per_pipeline_rank" => {
                    self.set("virtual_pipeline_model_parallel_size", scalar(g))
                }
                "num_layers_per_virtual_pipeline_stage" => self.vpp_from_layers(g)?,
                "decoder_first_pipeline_num_layers" => {
                    self.set("num_layers_in_first_pipeline_stage", scalar(g))
                }
                "decoder_last_pipeline_num_layers" => {
                    self.set("num_layers_in_last_pipeline_stage", scalar(g))
                }
                "cp_comm_type" => {
                    let types = match &g.value {
                        ArgValue::Many(v) => v.clone(),
                        other => other
                            .first()
                            .map(|s| vec![s.to_string()])
                            .unwrap_or_default(),
                    };
                    match types.first() {
                        Some(first) if types.iter().all(|t| t == first) => {
                            self.set("cp_comm_type", first.clone())
                        }
                        _ => self.ignored.push(ignore(
                            &g.option,
                            "per-layer CP communication types; the cost model takes one type for all layers",
                        )),
                    }
                }
                "recompute_modules" | "offload_modules" => self.set(&g.dest, list(g)),
                "hierarchical_context_parallel_sizes" => {
                    let sizes: Vec<Value> = match &g.value {
                        ArgValue::Many(v) => v.iter().map(|s| scalar_value(s)).collect(),
                        ArgValue::One(s) => vec![scalar_value(s)],
                        ArgValue::Switch(_) => Vec::new(),
                    };
                    self.set(&g.dest, Value::Array(sizes))
                }
                "cuda_graph_modules" | "cuda_graph_scope_deprecated" => {
                    // `full` (whole layers) is dropped where the field is read, as any spelling.
                    let scopes = match list(g) {
                        Value::Array(v) => v,
                        _ => Vec::new(),
                    };
                    self.set("cuda_graph_scope", Value::Array(scopes));
                }
                "enable_cuda_graph" if switch(g) => self.set("cuda_graph_impl", "local"),
                "external_cuda_graph" if switch(g) => {
                    self.set("cuda_graph_impl", "transformer_engine")
                }
                "moe_enable_deepep" if switch(g) => {
                    self.set("moe_token_dispatcher_type", "flex");
                    self.set("moe_flex_dispatcher_backend", "deepep");
                }
                "accumulate_allreduce_grads_in_fp32" if switch(g) => {
                    self.set("grad_reduce_in_fp32", true)
                }
                "grad_reduce_in_bf16" if switch(g) => self.set("grad_reduce_in_fp32", false),
                "recompute_activations"
                | "moe_layer_recompute"
                | "fp8"
                | "fp8_recipe"
                | "fp4"
                | "fp4_recipe"
                | "bf16"
                | "fp16"
                | "fine_grained_activation_offloading" => {
                    // Combined below.
                }
                "enable_cuda_graph"
                | "external_cuda_graph"
                | "moe_enable_deepep"
                | "accumulate_allreduce_grads_in_fp32"
                | "grad_reduce_in_bf16" => {}
                dest => match &g.value {
                    ArgValue::Switch(on) => self.set(dest, *on),
                    _ => self.set(dest, scalar(g)),
                },
            }
        }
        self.apply_recompute()?;
        self.apply_precision();
        self.apply_offloading();
        self.apply_expert_tensor_parallel();
        self.apply_attention_dropout();
        Ok(())
    }

    /// A whole command line runs Megatron-LM's default for every flag it leaves out. Where
    /// that default differs from the cost model's own (which follows the performance recipes),
    /// the line gets Megatron-LM's value and says so. `moe` says whether the model may have
    /// experts (the line sets `--num-experts`, or names its model elsewhere).
    pub(super) fn apply_megatron_defaults(&mut self, moe: bool) -> Result<(), ConfigError> {
        if !self.whole_command {
            return Ok(());
        }
        // Megatron-FSDP and Torch FSDP2 shard the optimizer state themselves (Megatron-FSDP v1
        // turns the distributed optimizer on); `dist_muon` is sharded by its own name.
        let sharded_otherwise = self.switch("use_megatron_fsdp")
            || self.switch("use_torch_fsdp2")
            || self.flat.get("optimizer").and_then(Value::as_str) == Some("dist_muon");
        for entry in MEGATRON_DEFAULTS_OVER_RECIPES {
            if self.flat.contains_key(entry.dest)
                || (entry.moe_only && !moe)
                || (entry.dest == "use_distributed_optimizer" && sharded_otherwise)
            {
                continue;
            }
            let Some((option, default)) = megatron_default(entry.dest)? else {
                continue;
            };
            let why = format!(
                "Megatron-LM's default, as the line does not give {option}: {}",
                entry.effect
            );
            self.assume(entry.dest, default.clone(), &why);
            self.flat.insert(entry.dest.to_string(), default);
        }
        // Without --moe-grouped-gemm Megatron-Core builds SequentialMLP (one TE linear pair per
        // local expert, run one after another; `grouped_mlp_modules`,
        // megatron/core/extensions/transformer_engine_spec_provider.py), which the time model
        // does not price: it is said, not modelled.
        if moe && !self.switch("moe_grouped_gemm") {
            self.assume(
                "moe_grouped_gemm",
                false,
                "Megatron-LM's default, as the line does not give --moe-grouped-gemm: the \
                 local experts run one after another (SequentialMLP), each with its own GEMMs \
                 and launches; the step time is priced for grouped GEMMs (TEGroupedMLP), so it \
                 is optimistic for this line",
            );
        }
        Ok(())
    }

    /// Megatron-LM: VPP = (layers / PP) / layers-per-virtual-stage, where the embedding
    /// and loss count as layers when `--account-for-*-in-pipeline-split` is set.
    fn vpp_from_layers(&mut self, g: &Given) -> Result<(), ConfigError> {
        let per_stage = parse_u64(&g.option, g.value.first())?;
        let layers = self
            .get("num_layers")
            .or_else(|| self.get("decoder_num_layers"))
            .map(|l| parse_u64(&l.option, l.value.first()))
            .transpose()?;
        let Some(mut layers) = layers else {
            return Err(ConfigError::InvalidValue {
                key: g.option.clone(),
                message: "converting layers per virtual stage to a VPP degree needs --num-layers; \
                          add it or give --num-virtual-stages-per-pipeline-rank"
                    .into(),
            });
        };
        layers += u64::from(self.switch("account_for_embedding_in_pipeline_split"));
        layers += u64::from(self.switch("account_for_loss_in_pipeline_split"));
        let pp = match self.get("pipeline_model_parallel_size") {
            Some(p) => parse_u64(&p.option, p.value.first())?,
            None => 1,
        };
        if pp == 0 || per_stage == 0 || layers % pp != 0 || (layers / pp) % per_stage != 0 {
            return Err(ConfigError::InvalidValue {
                key: g.option.clone(),
                message: format!(
                    "{layers} layers over {pp} pipeline stages do not split into virtual stages of {per_stage} layers (Megatron-LM requires both divisions to be exact)"
                ),
            });
        }
        self.set(
            "virtual_pipeline_model_parallel_size",
            (layers / pp) / per_stage,
        );
        Ok(())
    }

    /// `--recompute-activations` is selective recompute (Megatron-LM's validate_args);
    /// `--moe-layer-recompute` adds `moe` to the selective modules (TransformerConfig), whose
    /// default list is `[core_attn]`.
    fn apply_recompute(&mut self) -> Result<(), ConfigError> {
        let activations = self.switch("recompute_activations");
        let moe_layer = self.switch("moe_layer_recompute");
        if !activations && !moe_layer {
            return Ok(());
        }
        if self
            .flat
            .get("recompute_granularity")
            .and_then(Value::as_str)
            == Some("full")
        {
            let option = if moe_layer {
                "--moe-layer-recompute"
            } else {
                "--recompute-activations"
            };
            if moe_layer {
                return Err(ConfigError::InvalidValue {
                    key: option.into(),
                    message: "Megatron-LM refuses it with --recompute-granularity full".into(),
                });
            }
        }
        self.set("recompute_granularity", "selective");
        let mut modules: Vec<Value> = match self.flat.get("recompute_modules") {
            Some(Value::Array(v)) => v.clone(),
            _ => {
                self.assume(
                    "recompute_modules",
                    Value::from(vec!["core_attn"]),
                    "Megatron-LM's default selective-recompute module list",
                );
                vec![Value::from("core_attn")]
            }
        };
        if moe_layer && !modules.iter().any(|m| m.as_str() == Some("moe")) {
            modules.push(Value::from("moe"));
        }
        self.set("recompute_modules", Value::Array(modules));
        Ok(())
    }

    /// FP8 is on only with `--fp8-format`; its recipe defaults to `delayed`. FP4 likewise
    /// with `--fp4-format` (recipe `nvfp4`).
    fn apply_precision(&mut self) {
        let recipe = |r: &Reader, dest: &str| {
            r.get(dest)
                .and_then(|g| g.value.first())
                .map(str::to_string)
        };
        let fp8 = self.get("fp8").is_some();
        let fp4 = self.get("fp4").is_some();
        let fp8_recipe = recipe(self, "fp8_recipe");
        let fp4_recipe = recipe(self, "fp4_recipe");
        if fp4 {
            self.set("precision", "nvfp4");
            if fp4_recipe.is_none() {
                self.assume(
                    "fp4_recipe",
                    "nvfp4",
                    "Megatron-LM's default FP4 recipe when --fp4-format is given",
                );
            }
        } else if fp8 {
            let name = fp8_recipe.clone().unwrap_or_else(|| {
                self.assume(
                    "fp8_recipe",
                    "delayed",
                    "Megatron-LM's default FP8 recipe when --fp8-format is given",
                );
                "delayed".to_string()
            });
            let precision = match name.as_str() {
                "tensorwise" => "fp8-tensorwise",
                "blockwise" => "fp8-blockwise",
                "mxfp8" => "mxfp8",
                "delayed" => "fp8-delayed",
                other => other,
            };
            self.set("precision", precision);
        } else if self.switch("bf16") || self.switch("fp16") {
            self.set("precision", "bf16");
        } else if self.whole_command {
            self.assume(
                "precision",
                "bf16",
                "the command line sets none of --bf16, --fp16, --fp8-format, --fp4-format \
                 (Megatron-LM would train in fp32, which the cost model does not model)",
            );
        }
        if (fp8 || fp4) && self.whole_command && !self.switch("bf16") && !self.switch("fp16") {
            // `--fp8-format` only sets the GEMM precision: without --bf16 Megatron-LM's
            // params_dtype stays float32 (validate_args), so weights and the activations
            // between GEMMs are fp32, twice what the estimate counts.
            self.assume(
                "params_dtype",
                "bf16",
                "the command line gives a low-precision recipe but neither --bf16 nor --fp16: \
                 Megatron-LM would keep the weights and the activations between GEMMs in fp32 \
                 (params_dtype float32), which the cost model does not model; it prices them in bf16",
            );
        }
        if self.switch("fp16") && !fp8 && !fp4 {
            self.ignored.push(ignore(
                "--fp16",
                "FP16 is modelled as BF16 (same element size; loss scaling is not modelled)",
            ));
        }
        if !fp8 {
            if let Some(g) = self.get("fp8_recipe").cloned() {
                self.ignored.push(ignore(
                    g.option,
                    "has no effect without --fp8-format (Megatron-LM enables FP8 only with it)",
                ));
            }
        }
        if !fp4 {
            if let Some(g) = self.get("fp4_recipe").cloned() {
                self.ignored.push(ignore(
                    g.option,
                    "has no effect without --fp4-format (Megatron-LM enables FP4 only with it)",
                ));
            }
        }
    }

    /// `--offload-modules` acts only with `--fine-grained-activation-offloading`;
    /// `--cpu-offloading-num-layers N` turns whole-layer offloading on for N > 0
    /// (`validate_args`).
    fn apply_offloading(&mut self) {
        if self
            .flat
            .get("cpu_offloading_num_layers")
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 0)
        {
            self.set("cpu_offloading", true);
        }
        if self.switch("fine_grained_activation_offloading")
            && !self.flat.contains_key("offload_modules")
        {
            self.ignored.push(ignore(
                "--fine-grained-activation-offloading",
                "offloads nothing without --offload-modules",
            ));
        }
        if self.flat.contains_key("offload_modules")
            && !self.switch("fine_grained_activation_offloading")
        {
            self.flat.remove("offload_modules");
            if let Some(g) = self.get("offload_modules").cloned() {
                self.ignored.push(ignore(
                    g.option,
                    "has no effect without --fine-grained-activation-offloading",
                ));
            }
        }
    }

    /// Megatron-LM's attention dropout defaults to 0.1 (`TransformerConfig.attention_dropout`).
    /// It keeps tensors of its own only where the scores are materialised, so the default is
    /// filled in, and said, only for the `unfused` and `local` backends.
    fn apply_attention_dropout(&mut self) {
        if self.flat.contains_key("attention_dropout") {
            return;
        }
        let materialised = self
            .flat
            .get("attention_backend")
            .and_then(Value::as_str)
            .is_some_and(|b| matches!(b, "unfused" | "local"));
        if !materialised {
            return;
        }
        let default = Value::from(0.1);
        self.assume(
            "attention_dropout",
            default.clone(),
            "Megatron-LM's default --attention-dropout; with materialised scores it keeps a \
             dropout mask and the dropped probabilities",
        );
        self.flat.insert("attention_dropout".into(), default);
    }

    /// Megatron-LM sets ETP to TP when `--expert-tensor-parallel-size` is absent.
    fn apply_expert_tensor_parallel(&mut self) {
        // Only when the line sets TP: otherwise both are 1, the cost model's own default.
        if self.flat.contains_key("expert_tensor_parallel_size") {
            return;
        }
        let Some(tp) = self.flat.get("tensor_model_parallel_size").cloned() else {
            return;
        };
        self.assume(
            "expert_tensor_parallel_size",
            tp.clone(),
            "Megatron-LM sets ETP to TP when --expert-tensor-parallel-size is absent",
        );
        self.flat.insert("expert_tensor_parallel_size".into(), tp);
    }
}
