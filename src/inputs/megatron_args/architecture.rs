//! Architecture flags: with no model named elsewhere, the command line's model flags become a
//! HuggingFace-style `config.json` object (or the model its tokenizer names), read like any other.

use super::*;

/// Megatron-LM's Mamba-2 mixer flags.
const MAMBA_DIMS: [&str; 4] = [
    "mamba_state_dim",
    "mamba_head_dim",
    "mamba_num_groups",
    "mamba_num_heads",
];

impl Reader {
    /// Build the HuggingFace-style config from the architecture flags (when the line has
    /// the three that define a transformer); otherwise list them as unused.
    pub(super) fn build_architecture(&mut self, arch: &[Given]) -> Result<(), ConfigError> {
        if arch.is_empty() {
            return Ok(());
        }
        let core = ["hidden_size", "num_attention_heads"];
        // A hybrid pattern gives the layer count (one layer per symbol).
        let has_layers = [
            "num_layers",
            "decoder_num_layers",
            "hybrid_layer_pattern",
            "hybrid_override_pattern",
        ]
        .iter()
        .any(|dest| self.get(dest).is_some());
        let missing: Vec<String> = core
            .iter()
            .filter(|d| self.get(d).is_none())
            .map(|d| format!("--{}", d.replace('_', "-")))
            .chain((!has_layers).then(|| "--num-layers".to_string()))
            .collect();
        if !missing.is_empty() {
            for g in arch {
                self.ignored.push(ignore(
                    &g.option,
                    format!(
                        "architecture flag; the line lacks {} to build a model, so a model card or config.json must be named",
                        missing.join(", ")
                    ),
                ));
            }
            return Ok(());
        }
        if let Some(g) = arch
            .iter()
            .find(|g| megatron_use(&g.dest) == MegatronUse::UnsupportedArchitecture)
        {
            return Err(ConfigError::InvalidValue {
                key: g.option.clone(),
                message:
                    "the architecture cannot be built from Megatron-LM flags with this option; \
                          name a model card or give the model's config.json as `model`"
                        .into(),
            });
        }
        if let Some((repo, name)) = self.tokenizer_named_model() {
            // Without the vocabulary the flags do not define the model; the HuggingFace
            // tokenizer names it (`Qwen/Qwen3-30B-A3B`), as the card of that name.
            for g in arch {
                self.ignored.push(ignore(
                    &g.option,
                    format!(
                        "architecture flag: the vocabulary size is unknown (--tokenizer-model {repo} \
                         holds it in tokenizer files this reader does not open), so the model \
                         card named after the tokenizer, `{name}`, is used; add --vocab-size N \
                         to use the line's architecture instead"
                    ),
                ));
            }
            self.flat.insert("model".into(), Value::String(name));
            return Ok(());
        }
        let hf = self.hf_config()?;
        self.flat.insert("model".into(), hf);
        Ok(())
    }

    /// With no vocabulary size on the line, the HuggingFace repository of
    /// `--tokenizer-model` (`org/name`) and its model name; `None` otherwise.
    fn tokenizer_named_model(&self) -> Option<(String, String)> {
        if self.get("padded_vocab_size").is_some() || self.get("vocab_size").is_some() {
            return None;
        }
        let repo = self
            .get("tokenizer_model")?
            .value
            .first()?
            .trim()
            .to_string();
        let (org, name) = repo.split_once('/')?;
        let plain = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        (plain(org) && plain(name)).then(|| (repo.clone(), name.to_string()))
    }

    /// `dest` as given, else `default`, noted as assumed with `why`.
    fn u64_or_default(&mut self, dest: &str, default: u64, why: &str) -> Result<u64, ConfigError> {
        Ok(match self.u64_of(dest)? {
            Some(v) => v,
            None => {
                self.assume(dest, default, why);
                default
            }
        })
    }

    fn u64_of(&self, dest: &str) -> Result<Option<u64>, ConfigError> {
        match self.get(dest) {
            Some(g) => parse_u64(&g.option, g.value.first()).map(Some),
            None => Ok(None),
        }
    }

    /// The HuggingFace `config.json` keys [`crate::model::Architecture::from_hf_config`]
    /// reads, filled from Megatron-LM flags and Megatron-LM's defaults for absent ones.
    fn hf_config(&mut self) -> Result<Value, ConfigError> {
        let mut hf = Map::new();
        let pattern = self.hybrid_pattern()?;
        let layers = match self.u64_of("num_layers")? {
            Some(l) => l,
            None => match &pattern {
                Some(p) => p.len() as u64,
                None => self.u64_of("decoder_num_layers")?.unwrap_or(0),
            },
        };
        if let Some(p) = &pattern {
            if p.len() as u64 != layers {
                return Err(ConfigError::InvalidValue {
                    key: "--num-layers".into(),
                    message: format!(
                        "{layers} layers against the hybrid pattern's {} symbols; Megatron-LM takes the layer count from the pattern (drop --num-layers or make them agree)",
                        p.len()
                    ),
                });
            }
        }
        // The layer patterns below hold one entry per layer: bound the count first.
        crate::model::limits::LAYERS
            .check("", Some(layers))
            .map_err(|e| ConfigError::InvalidValue {
                key: "--num-layers".into(),
                message: e.to_string(),
            })?;
        let hidden = self.u64_of("hidden_size")?.unwrap_or(0);
        let heads = self.u64_of("num_attention_heads")?.unwrap_or(0);
        hf.insert("model_type".into(), "megatron-lm".into());
        hf.insert("_name_or_path".into(), "Megatron-LM command line".into());
        hf.insert("num_hidden_layers".into(), layers.into());
        hf.insert("hidden_size".into(), hidden.into());
        hf.insert("num_attention_heads".into(), heads.into());

        // Vocabulary: --padded-vocab-size is used as given; --vocab-size is padded to a
        // multiple of make_vocab_size_divisible_by × TP (megatron/training/vocab_utils.py).
        let vocab = match (
            self.u64_of("padded_vocab_size")?,
            self.u64_of("vocab_size")?,
        ) {
            (Some(v), _) => v,
            (None, given) => {
                // The size before padding: --vocab-size, else a fixed tokenizer's vocabulary.
                let (raw, why) = match (given, self.fixed_tokenizer_vocab()?) {
                    (Some(v), _) => (v, "--vocab-size".to_string()),
                    (None, Some((name, v, source))) => (
                        v,
                        format!("--tokenizer-type {name} has {v} tokens ({source}), which"),
                    ),
                    (None, None) => {
                        let tokenizer = self
                            .get("tokenizer_type")
                            .and_then(|g| g.value.first())
                            .map(|t| format!(" (--tokenizer-type {t} reads it from tokenizer files this reader does not open)"))
                            .unwrap_or_default();
                        return Err(ConfigError::InvalidValue {
                            key: "--vocab-size".into(),
                            message: format!(
                                "the vocabulary size is unknown{tokenizer}; add --vocab-size N or --padded-vocab-size N, or name a model card"
                            ),
                        });
                    }
                };
                let divisible = self.u64_of("make_vocab_size_divisible_by")?.unwrap_or(128);
                let tp = self
                    .flat
                    .get("tensor_model_parallel_size")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                let multiple = divisible.saturating_mul(tp).max(1);
                let padded = raw.div_ceil(multiple).saturating_mul(multiple);
                // A size the line gave and padding left alone needs no note.
                if padded != raw || given.is_none() {
                    self.assume(
                        "padded_vocab_size",
                        padded,
                        &format!(
                            "Megatron-LM pads {why} to a multiple of --make-vocab-size-divisible-by (128 by default) times TP"
                        ),
                    );
                }
                padded
            }
        };
        hf.insert("vocab_size".into(), vocab.into());
        hf.insert(
            "tie_word_embeddings".into(),
            (!self.switch("untie_embeddings_and_output_weights")).into(),
        );

        // Attention heads: query groups count only with --group-query-attention.
        if self.switch("group_query_attention") {
            let groups = match self.u64_of("num_query_groups")? {
                Some(g) => g,
                None => {
                    self.assume(
                        "num_query_groups",
                        1,
                        "Megatron-LM's default with --group-query-attention",
                    );
                    1
                }
            };
            hf.insert("num_key_value_heads".into(), groups.into());
        } else {
            if let Some(g) = self.get("num_query_groups").cloned() {
                self.ignored.push(ignore(
                    g.option,
                    "has no effect without --group-query-attention (Megatron-LM uses one KV head per query head)",
                ));
            }
            hf.insert("num_key_value_heads".into(), heads.into());
        }
        if let Some(kv) = self.u64_of("kv_channels")? {
            hf.insert("head_dim".into(), kv.into());
        }
        if self.switch("attention_output_gate") {
            hf.insert("attn_output_gate".into(), true.into());
        }

        // MLP: Megatron-LM's default FFN width is 4h, or int(8h/3 / 64)·64 with SwiGLU.
        let gated = self.switch("swiglu") || self.switch("quick_geglu");
        let ffn = match self.u64_of("ffn_hidden_size")? {
            Some(f) => f,
            None => {
                let f = if gated {
                    hidden.saturating_mul(8) / 3 / 64 * 64
                } else {
                    hidden.saturating_mul(4)
                };
                self.assume(
                    "ffn_hidden_size",
                    f,
                    "Megatron-LM's default: 4 × hidden, or ⌊8·hidden/3/64⌋·64 with --swiglu",
                );
                f
            }
        };
        hf.insert("intermediate_size".into(), ffn.into());
        let act = if gated {
            "silu"
        } else if self.switch("squared_relu") {
            "relu2"
        } else {
            "gelu"
        };
        hf.insert("hidden_act".into(), act.into());
        if let Some(g) = self.get("activation_func_clamp_value").cloned() {
            hf.insert(
                "swiglu_limit".into(),
                scalar_value(g.value.first().unwrap_or_default()),
            );
        }

        // MLA.
        if self.switch("multi_latent_attention") {
            if let Some(q) = self.u64_of("q_lora_rank")? {
                hf.insert("q_lora_rank".into(), q.into());
            }
            for (dest, key, default) in [
                ("kv_lora_rank", "kv_lora_rank", 32),
                ("qk_head_dim", "qk_nope_head_dim", 128),
                ("qk_pos_emb_head_dim", "qk_rope_head_dim", 64),
                ("v_head_dim", "v_head_dim", 128),
            ] {
                let value = self.u64_or_default(
                    dest,
                    default,
                    "Megatron-LM's default with --multi-latent-attention",
                )?;
                hf.insert(key.into(), value.into());
            }
        } else {
            for dest in [
                "q_lora_rank",
                "kv_lora_rank",
                "qk_head_dim",
                "qk_pos_emb_head_dim",
                "v_head_dim",
            ] {
                if let Some(g) = self.get(dest).cloned() {
                    self.ignored.push(ignore(
                        g.option,
                        "has no effect without --multi-latent-attention",
                    ));
                }
            }
        }

        self.gated_deltanet(&mut hf, layers)?;
        match pattern {
            Some(p) => self.mamba_mixer(&mut hf, p, hidden)?,
            None => {
                for dest in MAMBA_DIMS.iter().chain(&["is_hybrid_model"]) {
                    if let Some(g) = self.get(dest).cloned() {
                        self.ignored.push(ignore(
                            g.option,
                            "has no effect without --hybrid-layer-pattern (Megatron-LM builds Mamba-2 layers only from the pattern)",
                        ));
                    }
                }
            }
        }

        // MoE.
        let experts = self.u64_of("num_experts")?.unwrap_or(0);
        if experts > 1 {
            hf.insert("num_experts".into(), experts.into());
            let topk = match self.u64_of("moe_router_topk")? {
                Some(k) => k,
                None => {
                    self.assume("moe_router_topk", 2, "Megatron-LM's default router top-k");
                    2
                }
            };
            hf.insert("num_experts_per_tok".into(), topk.into());
            let expert_ffn = match self.u64_of("moe_ffn_hidden_size")? {
                Some(f) => f,
                None => {
                    self.assume(
                        "moe_ffn_hidden_size",
                        ffn,
                        "Megatron-LM uses --ffn-hidden-size for experts when --moe-ffn-hidden-size is absent",
                    );
                    ffn
                }
            };
            hf.insert("moe_intermediate_size".into(), expert_ffn.into());
            // Linear layers, the experts' included, carry biases unless --disable-bias-linear
            // (TransformerConfig.add_bias_linear defaults to true); Megatron-Core then adds the
            // experts' second bias per local expert in FP32, which the time model prices.
            let biased = !matches!(
                self.get("add_bias_linear").map(|g| &g.value),
                Some(ArgValue::Switch(false))
            );
            if biased {
                self.assume(
                    "add_bias_linear",
                    true,
                    "Megatron-LM's default: the experts' linear layers carry biases (--disable-bias-linear turns them off)",
                );
            }
            hf.insert("mlp_bias".into(), biased.into());
            if let Some(shared) = self.u64_of("moe_shared_expert_intermediate_size")? {
                hf.insert("shared_expert_intermediate_size".into(), shared.into());
            }
            let dense = self.leading_dense_layers(layers)?;
            hf.insert("first_k_dense_replace".into(), dense.into());
            // Group-limited routing, under the HF names the architecture reader takes.
            for (dest, hf_key) in [
                ("moe_router_num_groups", "n_group"),
                ("moe_router_group_topk", "topk_group"),
            ] {
                if let Some(v) = self.u64_of(dest)? {
                    hf.insert(hf_key.into(), v.into());
                }
            }
        } else {
            for dest in [
                "moe_router_topk",
                "moe_ffn_hidden_size",
                "moe_shared_expert_intermediate_size",
                "moe_layer_freq",
                "moe_router_num_groups",
                "moe_router_group_topk",
            ] {
                if let Some(g) = self.get(dest).cloned() {
                    self.ignored
                        .push(ignore(g.option, "has no effect without --num-experts"));
                }
            }
        }
        if let Some(mtp) = self.u64_of("mtp_num_layers")? {
            hf.insert("num_nextn_predict_layers".into(), mtp.into());
        }
        if let Some(g) = self.get("max_position_embeddings").cloned() {
            hf.insert(
                "max_position_embeddings".into(),
                scalar_value(g.value.first().unwrap_or_default()),
            );
            self.ignored.push(ignore(
                g.option,
                "sizes the position-embedding table only; the cost model does not count position embeddings",
            ));
        }
        // Used above (a fixed tokenizer's vocabulary) only when no size is given.
        let sized = self.get("padded_vocab_size").is_some() || self.get("vocab_size").is_some();
        if let Some(g) = self.get("tokenizer_type").cloned() {
            if sized || self.fixed_tokenizer_vocab()?.is_none() {
                self.ignored.push(ignore(
                    g.option,
                    "the vocabulary size comes from --vocab-size/--padded-vocab-size",
                ));
            }
        }
        let config = Value::Object(hf);
        crate::model::Architecture::from_hf_config(&config).map_err(|e| {
            ConfigError::InvalidValue {
                key: "model".into(),
                message: format!("the architecture from the Megatron-LM flags is invalid: {e}"),
            }
        })?;
        Ok(config)
    }

    /// Gated DeltaNet layers (`--experimental-attention-variant gdn`, or its older spelling
    /// `gated_delta_net`): the layer pattern of `--linear-attention-freq` and the GDN widths,
    /// Megatron-Core's `TransformerConfig` defaults for those not given, as the
    /// `layer_types` and `linear_*` keys of a HuggingFace config. The other variants (`gdn2`,
    /// DeepSeek's sparse attention `dsa`) are not priced.
    fn gated_deltanet(
        &mut self,
        hf: &mut Map<String, Value>,
        layers: u64,
    ) -> Result<(), ConfigError> {
        const DIMS: [&str; 5] = [
            "linear_conv_kernel_dim",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
        ];
        let Some(variant) = self.get("experimental_attention_variant").cloned() else {
            for dest in DIMS.iter().chain(&["linear_attention_freq"]) {
                if let Some(g) = self.get(dest).cloned() {
                    self.ignored.push(ignore(
                        g.option,
                        "has no effect without --experimental-attention-variant gdn",
                    ));
                }
            }
            return Ok(());
        };
        let name = variant.value.first().unwrap_or_default().trim().to_string();
        if !matches!(name.as_str(), "gdn" | "gated_delta_net") {
            return Err(ConfigError::InvalidValue {
                key: variant.option,
                message: format!(
                    "the cost model prices the `gdn` variant (Gated DeltaNet), not `{name}`; \
                     name a model card or give the model's config.json as `model`"
                ),
            });
        }
        // Megatron-Core's pattern: 1 marks a linear-attention layer, 0 a softmax one; an
        // integer N puts softmax attention on every N-th layer
        // (`get_linear_attention_pattern`, experimental_attention_variant_module_specs.py).
        let Some(freq) = self.get("linear_attention_freq").cloned() else {
            return Err(ConfigError::InvalidValue {
                key: "--linear-attention-freq".into(),
                message: format!(
                    "--experimental-attention-variant {name} needs the layer pattern (Megatron-Core refuses it without one): give --linear-attention-freq N (every N-th layer softmax attention) or a list pattern"
                ),
            });
        };
        let pattern = per_layer_pattern(&freq, layers, |i, n| u64::from((i + 1) % n != 0))?;
        let types: Vec<Value> = pattern
            .iter()
            .map(|&linear| {
                Value::from(if linear == 1 {
                    "linear_attention"
                } else {
                    "full_attention"
                })
            })
            .collect();
        hf.insert("layer_types".into(), Value::Array(types));
        for (dest, default) in DIMS.into_iter().zip([4, 128, 128, 16, 32]) {
            let value = self.u64_or_default(
                dest,
                default,
                "Megatron-Core's TransformerConfig default for Gated DeltaNet",
            )?;
            hf.insert(dest.into(), value.into());
        }
        Ok(())
    }

    /// The hybrid layer pattern (`--hybrid-layer-pattern`, or its older name
    /// `--hybrid-override-pattern`) without its pipeline-stage separators (`|`, which this
    /// reader does not follow: stages split the layers evenly), after
    /// [`check_hybrid_pattern`].
    fn hybrid_pattern(&mut self) -> Result<Option<String>, ConfigError> {
        let Some(g) = self
            .get("hybrid_layer_pattern")
            .or_else(|| self.get("hybrid_override_pattern"))
            .cloned()
        else {
            return Ok(None);
        };
        let raw = g.value.first().unwrap_or_default().trim().to_string();
        check_hybrid_pattern(&g.option, &raw)?;
        if raw.contains('|') {
            self.ignored.push(ignore(
                g.option,
                "the pattern's pipeline-stage separators (`|`): stages are priced with the layers split evenly",
            ));
        }
        Ok(Some(raw.chars().filter(|&c| c != '|').collect()))
    }

    /// The Mamba-2 mixer of a hybrid pattern as HuggingFace `nemotron_h` keys, Megatron-LM's
    /// defaults for the dims not given (`--mamba-state-dim` 128, `--mamba-head-dim` 64,
    /// `--mamba-num-groups` 8; without `--mamba-num-heads`, `MambaMixer` takes an inner width
    /// of twice the hidden size).
    fn mamba_mixer(
        &mut self,
        hf: &mut Map<String, Value>,
        pattern: String,
        hidden: u64,
    ) -> Result<(), ConfigError> {
        let why = "Megatron-LM's default for Mamba-2 layers";
        let state = self.u64_or_default("mamba_state_dim", 128, why)?;
        let head_dim = self.u64_or_default("mamba_head_dim", 64, why)?;
        let groups = self.u64_or_default("mamba_num_groups", 8, why)?;
        let heads = match self.u64_of("mamba_num_heads")? {
            Some(h) => h,
            None => {
                let h = hidden.saturating_mul(2) / head_dim.max(1);
                self.assume(
                    "mamba_num_heads",
                    h,
                    "Megatron-Core's MambaMixer: an inner width of 2 × hidden over the head dim",
                );
                h
            }
        };
        hf.insert("hybrid_override_pattern".into(), pattern.into());
        hf.insert("mamba_num_heads".into(), heads.into());
        hf.insert("mamba_head_dim".into(), head_dim.into());
        hf.insert("ssm_state_size".into(), state.into());
        hf.insert("n_groups".into(), groups.into());
        Ok(())
    }

    /// `--moe-layer-freq`: N means layer i is MoE when i % N == 0; a list pattern gives one
    /// 0/1 per layer. The cost model represents leading dense layers followed by MoE layers.
    fn leading_dense_layers(&self, layers: u64) -> Result<u64, ConfigError> {
        let Some(g) = self.get("moe_layer_freq") else {
            return Ok(0);
        };
        let pattern = per_layer_pattern(g, layers, |i, n| u64::from(i % n == 0))?;
        let dense = pattern.iter().take_while(|&&x| x == 0).count();
        if pattern[dense..].iter().any(|&x| x != 1) {
            return Err(ConfigError::InvalidValue {
                key: g.option.clone(),
                message: "dense layers between MoE layers are not modelled (only leading dense layers followed by MoE layers); name a model card instead".into(),
            });
        }
        Ok(dense as u64)
    }
}

/// A per-layer 0/1 flag (`--moe-layer-freq`, `--linear-attention-freq`): a Python list
/// expression gives one entry per layer; an integer N gives `of_interval(layer, N)` for each.
fn per_layer_pattern(
    given: &Given,
    layers: u64,
    of_interval: impl Fn(u64, u64) -> u64,
) -> Result<Vec<u64>, ConfigError> {
    let text = given.value.first().unwrap_or_default();
    if text.contains('[') {
        let pattern = eval_layer_pattern(text).map_err(|message| ConfigError::InvalidValue {
            key: given.option.clone(),
            message,
        })?;
        if pattern.len() as u64 != layers {
            return Err(ConfigError::InvalidValue {
                key: given.option.clone(),
                message: format!(
                    "the pattern has {} entries but the model has {layers} layers",
                    pattern.len()
                ),
            });
        }
        return Ok(pattern);
    }
    let n = parse_u64(&given.option, Some(text))?;
    if n == 0 {
        return Err(ConfigError::InvalidValue {
            key: given.option.clone(),
            message: "must be positive".into(),
        });
    }
    Ok((0..layers).map(|i| of_interval(i, n)).collect())
}
