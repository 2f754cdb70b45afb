//! What a configuration implies: reading it from fields, the defaults the cost model applies
//! where a field is unset (Megatron's and the skills'), and the arithmetic on its settings.

use super::*;

impl TrainingConfig {
    /// Reads a flat object of field names (and aliases). Unknown keys are errors naming the
    /// closest field; a value of the wrong type names its key. Other formats: `crate::inputs`.
    pub fn from_fields(value: &Value) -> Result<TrainingConfig, ConfigError> {
        let flat = match value {
            Value::Object(o) => o.clone(),
            Value::Null => return Ok(TrainingConfig::default()),
            _ => {
                return Err(ConfigError::Parse(
                    "a training configuration must be a mapping of keys to values".into(),
                ))
            }
        };
        if let Some(key) = flat.keys().find(|k| !is_known_key(k)) {
            return Err(ConfigError::UnknownKey {
                key: key.clone(),
                suggestion: closest_key(key),
            });
        }
        let mut flat = flat;
        merge_cuda_graph_names(&mut flat)?;
        serde_json::from_value(Value::Object(flat.clone()))
            .map_err(|e| describe_serde_error(&flat, e))
    }

    /// Every setting the cost model reads that this configuration leaves unset, with the value
    /// the accessors below give it and why. Built from the accessors themselves, so the list
    /// cannot disagree with what the model used. Model, hardware and dispatcher defaults come
    /// from the cards and are added by the tools.
    pub fn assumed_defaults(&self) -> Vec<AssumedDefault> {
        // What the reader assumed (Megatron-LM's ETP = TP, ...) comes first.
        let mut out = self.assumed_defaults.clone();
        let mut note = |set: bool, key: &str, value: Value, why: &str| {
            if !set && !out.iter().any(|a| a.key == key) {
                out.push(AssumedDefault::new(key, value, why));
            }
        };
        let megatron = "Megatron's default";
        note(
            self.tensor_model_parallel_size.is_some(),
            "tensor_model_parallel_size",
            self.tp().into(),
            megatron,
        );
        note(
            self.pipeline_model_parallel_size.is_some(),
            "pipeline_model_parallel_size",
            self.pp().into(),
            megatron,
        );
        note(
            self.virtual_pipeline_model_parallel_size.is_some(),
            "virtual_pipeline_model_parallel_size",
            self.vpp().into(),
            "no interleaving unless given",
        );
        note(
            self.context_parallel_size.is_some(),
            "context_parallel_size",
            self.cp().into(),
            megatron,
        );
        note(
            self.expert_model_parallel_size.is_some(),
            "expert_model_parallel_size",
            self.ep().into(),
            megatron,
        );
        note(
            self.expert_tensor_parallel_size.is_some(),
            "expert_tensor_parallel_size",
            self.etp().into(),
            "the MoE recipes' choice (Megatron-LM itself falls back to TP; set it to compare)",
        );
        note(
            self.sequence_parallel.is_some(),
            "sequence_parallel",
            self.sequence_parallel().into(),
            "on whenever TP > 1, as Megatron requires for MoE and the recipes set",
        );
        note(
            self.micro_batch_size.is_some(),
            "micro_batch_size",
            self.mbs().into(),
            megatron,
        );
        note(
            self.precision.is_some(),
            "precision",
            serde_json::to_value(self.precision()).unwrap_or_default(),
            "BF16 unless asked: every tool uses the same default",
        );
        note(
            self.recompute_granularity.is_some() || self.recompute_modules.is_some(),
            "recompute_granularity",
            Value::Null,
            "no activation recompute unless given",
        );
        note(
            self.recompute_granularity.is_some() || self.recompute_modules.is_none(),
            "recompute_granularity",
            Value::Null,
            "recompute_modules are given without recompute_granularity; Megatron applies them \
             only with `selective`, so nothing is recomputed",
        );
        note(
            self.use_distributed_optimizer.is_some() || self.use_megatron_fsdp.is_some(),
            "use_distributed_optimizer",
            self.distributed_optimizer().into(),
            "the distributed optimizer, as every MoE recipe uses",
        );
        note(
            self.grad_reduce_in_fp32.is_some(),
            "grad_reduce_in_fp32",
            (self.gradient_bytes() == 4.0).into(),
            "fp32 gradient buffers, as Megatron-LM forces for BF16 training",
        );
        note(
            self.optimizer_cpu_offload.is_some(),
            "optimizer_cpu_offload",
            false.into(),
            "optimizer state stays on the GPU unless given",
        );
        out
    }

    // ---- resolved values (defaults applied) ----
    pub fn tp(&self) -> u32 {
        self.tensor_model_parallel_size.unwrap_or(1)
    }
    pub fn pp(&self) -> u32 {
        self.pipeline_model_parallel_size.unwrap_or(1)
    }
    pub fn vpp(&self) -> u32 {
        self.virtual_pipeline_model_parallel_size.unwrap_or(1)
    }
    pub fn cp(&self) -> u32 {
        self.context_parallel_size.unwrap_or(1)
    }
    pub fn ep(&self) -> u32 {
        self.expert_model_parallel_size.unwrap_or(1)
    }
    /// How the CP ranks split into (all-to-all group, ring) for the attention kernels, as
    /// Transformer Engine's `attn_forward_func_with_cp` runs them: `a2a` is one all-to-all
    /// over all of CP, `p2p` / `allgather` one ring, `a2a+p2p` an all-to-all of the first
    /// `hierarchical_context_parallel_sizes` entry inside a ring of the rest (a ring over
    /// all of CP when the sizes are missing or do not multiply to CP, which a rule reports).
    pub fn cp_groups(&self) -> (u32, u32) {
        let cp = self.cp().max(1);
        match self.cp_comm_type.unwrap_or(CpCommType::P2p) {
            CpCommType::A2a => (cp, 1),
            CpCommType::P2p | CpCommType::Allgather => (1, cp),
            CpCommType::A2aP2p => match self.hierarchical_cp_sizes() {
                Some((a2a, ring)) => (a2a, ring),
                None => (1, cp),
            },
        }
    }
    /// `hierarchical_context_parallel_sizes` as (all-to-all size, ring size) when it has at
    /// least two positive entries whose product is CP.
    pub fn hierarchical_cp_sizes(&self) -> Option<(u32, u32)> {
        let sizes = self.hierarchical_context_parallel_sizes.as_deref()?;
        let (&a2a, rest) = sizes.split_first()?;
        if rest.is_empty() || a2a == 0 || rest.contains(&0) {
            return None;
        }
        let ring = rest.iter().try_fold(1u32, |acc, &x| acc.checked_mul(x))?;
        (a2a.checked_mul(ring)? == self.cp()).then_some((a2a, ring))
    }
    /// Defaults to 1 (the MoE recipes' choice), not Megatron-LM's fallback to TP.
    pub fn etp(&self) -> u32 {
        self.expert_tensor_parallel_size.unwrap_or(1)
    }
    /// Whether the experts are split over more than one GPU (expert TP × EP > 1): the group
    /// the flex dispatcher's DeepEP backend needs.
    pub fn experts_split(&self) -> bool {
        u64::from(self.etp()) * u64::from(self.ep()) > 1
    }
    pub fn mbs(&self) -> u32 {
        self.micro_batch_size.unwrap_or(1)
    }
    pub fn precision(&self) -> Precision {
        self.precision.unwrap_or_default()
    }
    /// Whether fused attention runs in FP8: `fp8_dot_product_attention` in an FP8/FP4 run,
    /// except under the blockwise recipe, which Megatron-Core builds without `fp8_dpa`
    /// (`megatron/core/fp8_utils.py:get_fp8_recipe`, Megatron-LM d98e8a64), so the flag has
    /// no effect there (the `fp8_attention_without_effect` rule says so).
    pub fn fp8_attention(&self) -> bool {
        let precision = self.precision();
        self.fp8_dot_product_attention.unwrap_or(false)
            && precision.is_low_precision()
            && precision != Precision::Fp8Blockwise
    }
    pub fn sequence_parallel(&self) -> bool {
        self.sequence_parallel.unwrap_or(self.tp() > 1)
    }
    pub fn recompute_modules(&self) -> &[RecomputeModule] {
        self.recompute_modules.as_deref().unwrap_or(&[])
    }
    pub fn has_recompute(&self, module: &RecomputeModule) -> bool {
        self.recompute_granularity == Some(RecomputeGranularity::Selective)
            && self.recompute_modules().contains(module)
    }
    /// Layers whose saved activations whole-layer offloading sends to the host: the model's
    /// first `cpu_offloading_num_layers` when `cpu_offloading` is on and moves activations.
    pub fn offloaded_layers(&self) -> u32 {
        if self.cpu_offloading.unwrap_or(false) && self.cpu_offloading_activations.unwrap_or(true) {
            self.cpu_offloading_num_layers.unwrap_or(0)
        } else {
            0
        }
    }
    pub fn full_recompute(&self) -> bool {
        self.recompute_granularity == Some(RecomputeGranularity::Full)
    }
    pub fn distributed_optimizer(&self) -> bool {
        self.use_distributed_optimizer.unwrap_or(true)
    }
    /// Optimizer state bytes per parameter: master weights plus the algorithm's moments.
    pub fn optimizer_state_bytes(&self) -> f64 {
        self.state_bytes_of(self.optimizer_kind())
    }
    /// The optimizer that steps the parameters the Muon family leaves out: the embedding and
    /// output layer and every parameter that is not a matrix (`_is_muon_excluded`,
    /// megatron/core/optimizer/emerging_optimizers.py, Megatron-LM d98e8a64), which Megatron-LM
    /// routes to `muon_scalar_optimizer`, Adam by default (`optimizer_config.py`). Any other
    /// optimizer steps them itself.
    pub fn scalar_param_optimizer_kind(&self) -> OptimizerKind {
        match self.optimizer_kind() {
            OptimizerKind::Muon | OptimizerKind::DistMuon => OptimizerKind::Adam,
            other => other,
        }
    }
    fn optimizer_kind(&self) -> OptimizerKind {
        self.optimizer.unwrap_or(OptimizerKind::Adam)
    }
    /// Master weights plus `kind`'s moments, in the configured buffer dtypes.
    fn state_bytes_of(&self, kind: OptimizerKind) -> f64 {
        let aware = self.use_precision_aware_optimizer.unwrap_or(false);
        // A buffer's dtype counts only with the precision-aware optimizer. Unset, or without
        // it, the buffer is fp32, as Megatron-Core's OptimizerConfig (and `--exp-avg-dtype`,
        // `--exp-avg-sq-dtype`) default them; Megatron-Bridge's recipes set BF16 moments.
        let pick = |set: Option<BufferDtype>| -> f64 {
            set.filter(|_| aware)
                .map_or(BufferDtype::Float32.bytes(), BufferDtype::bytes)
        };
        let master = pick(self.main_params_dtype);
        match kind {
            OptimizerKind::Adam => master + pick(self.exp_avg_dtype) + pick(self.exp_avg_sq_dtype),
            // One momentum buffer.
            OptimizerKind::Sgd | OptimizerKind::Muon | OptimizerKind::DistMuon => {
                master + pick(self.exp_avg_dtype)
            }
        }
    }
    /// Optimizer-state bytes per parameter left on the GPU. Without CPU offload that is
    /// `optimizer_state_bytes`. With it, Megatron-LM builds a `HybridDeviceOptimizer`
    /// (`megatron/core/optimizer/__init__.py::_get_megatron_optimizer_based_on_param_groups`,
    /// `param_update_in_fp32=True`, GPU `FusedAdam` / CPU `torch.optim.AdamW` with their
    /// default fp32 moments, so bf16 moment dtypes do not apply) and:
    /// - without the precision-aware optimizer, `DistributedOptimizer::
    ///   _build_model_and_main_param_groups` (`distrib_optimizer.py`) first allocates the fp32
    ///   main-parameter shard on the GPU; `HybridDeviceOptimizer::
    ///   _get_sub_optimizer_param_groups` (`cpu_offloading/hybrid_optimizer.py`) steps a
    ///   pinned CPU clone of the offloaded part, and `param_copy_back_gpu_hook` copies it back
    ///   into that GPU shard after every step. The 4-byte master stays; only the moments of
    ///   the offloaded fraction leave (8 of 12 bytes for Adam at fraction 1);
    /// - with it (offload forces `use_precision_aware_optimizer_no_fp8_or_ds_fp8`), the bf16
    ///   shards are handed over and the fp32 master is cloned on the device the part is
    ///   stepped on: the offloaded fraction leaves whole, the rest keeps fp32 master + moments.
    pub fn gpu_optimizer_state_bytes(&self) -> f64 {
        self.gpu_state_bytes_of(self.optimizer_kind())
    }
    /// `gpu_optimizer_state_bytes` of the parameters `scalar_param_optimizer_kind` steps.
    pub fn gpu_scalar_param_state_bytes(&self) -> f64 {
        self.gpu_state_bytes_of(self.scalar_param_optimizer_kind())
    }
    fn gpu_state_bytes_of(&self, kind: OptimizerKind) -> f64 {
        if !self.optimizer_cpu_offload.unwrap_or(false) {
            return self.state_bytes_of(kind);
        }
        let fraction = self.offload_fraction();
        let fp32 = BufferDtype::Float32.bytes();
        let moments = fp32 * moments_of(kind);
        if self.use_precision_aware_optimizer.unwrap_or(false) {
            (1.0 - fraction) * (fp32 + moments)
        } else {
            fp32 + (1.0 - fraction) * moments
        }
    }
    /// Bytes per model weight element: 1 for FP8 primary weights (`fp8_param_gather` in an
    /// FP8/FP4 run), else 2.
    pub fn weight_bytes(&self) -> f64 {
        if self.precision() == Precision::Nvfp4 && self.fp4_param_gather.unwrap_or(false) {
            NVFP4_BYTES_PER_VALUE
        } else if self.precision().is_low_precision() && self.fp8_param_gather.unwrap_or(false) {
            1.0
        } else {
            2.0
        }
    }
    /// Whether the offloaded step pipelines its copies with the host step
    /// (`overlap_cpu_optimizer_d2h_h2d`; off unless given, as in Megatron-LM).
    pub fn overlaps_cpu_optimizer_copies(&self) -> bool {
        self.overlap_cpu_optimizer_d2h_h2d.unwrap_or(false)
    }
    /// Moment buffers per parameter: Adam keeps two, SGD-style optimizers and Muon one.
    pub fn optimizer_moments(&self) -> f64 {
        moments_of(self.optimizer_kind())
    }
    /// Whether any parallel size is given (TP, PP, EP or CP): a reading without one answers
    /// at Megatron's defaults, not at the layout of the recipe it came from.
    pub fn sets_parallel_sizes(&self) -> bool {
        self.tensor_model_parallel_size.is_some()
            || self.pipeline_model_parallel_size.is_some()
            || self.expert_model_parallel_size.is_some()
            || self.context_parallel_size.is_some()
    }

    /// Whether the base weights are frozen (PEFT): they then hold no gradients or optimizer
    /// state and skip their weight-gradient GEMMs.
    pub fn frozen_base_weights(&self) -> bool {
        self.peft.unwrap_or(false)
    }
    /// Whether optimizer state is sharded over data-parallel ranks without FSDP.
    pub fn optimizer_sharded(&self) -> bool {
        self.distributed_optimizer() || self.optimizer == Some(OptimizerKind::DistMuon)
    }
    /// Bytes per gradient element in the gradient buffers (fp32 unless turned off).
    pub fn gradient_bytes(&self) -> f64 {
        if self.grad_reduce_in_fp32.unwrap_or(true) {
            4.0
        } else {
            2.0
        }
    }
    pub fn fsdp_strategy(&self) -> Option<FsdpStrategy> {
        if self.use_megatron_fsdp.unwrap_or(false) {
            Some(
                self.data_parallel_sharding_strategy
                    .unwrap_or(FsdpStrategy::OptimGradsParams),
            )
        } else {
            None
        }
    }
    /// Distributed-optimizer copies across the data-parallel ranks (1 unless given).
    pub fn optimizer_instances(&self) -> u32 {
        self.num_distributed_optimizer_instances.unwrap_or(1).max(1)
    }
    /// Whether hybrid FSDP shards the optimizer state across its copies too
    /// (`outer_dp_sharding_strategy: optim`; Megatron FSDP's HSDP exists only with more than
    /// one copy, `mcore_fsdp_adapter.py`).
    pub fn outer_dp_shards_optimizer(&self) -> bool {
        self.fsdp_strategy().is_some()
            && self.optimizer_instances() > 1
            && self.outer_dp_sharding_strategy == Some(FsdpStrategy::Optim)
    }
    /// Whether the optimizer state is sharded over the data-parallel ranks: the distributed
    /// optimizer (or `dist_muon`), or Megatron FSDP with any strategy but `no_shard`.
    pub fn optimizer_state_sharded(&self) -> bool {
        match self.fsdp_strategy() {
            Some(strategy) => strategy != FsdpStrategy::NoShard,
            None => self.optimizer_sharded(),
        }
    }
    /// How many groups the data-parallel ranks are split into for the optimizer state: each
    /// distributed-optimizer copy shards over its share, unless hybrid FSDP shards the state
    /// over every rank again (then one).
    pub fn optimizer_state_copies(&self) -> u32 {
        if self.outer_dp_shards_optimizer() {
            1
        } else {
            self.optimizer_instances()
        }
    }
    /// Fraction of optimizer state moved to host memory.
    pub fn offload_fraction(&self) -> f64 {
        if self.optimizer_cpu_offload.unwrap_or(false) {
            self.optimizer_offload_fraction
                .unwrap_or(1.0)
                .clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
    /// SMs the configuration gives the dispatcher `d`'s communication kernels: the unified
    /// `moe_flex_dispatcher_num_sms` first, else the earlier per-backend knob of `d`'s backend
    /// (Megatron-Core routes a deprecated knob to the unified one; releases before that read
    /// each for its own backend). `None`: the backend's default.
    pub fn dispatcher_num_sms(&self, d: ResolvedDispatcher) -> Option<u32> {
        self.moe_flex_dispatcher_num_sms.or(match d {
            ResolvedDispatcher::Deepep => self.moe_deepep_num_sms,
            ResolvedDispatcher::Hybridep => self.moe_hybridep_num_sms,
            _ => None,
        })
    }

    /// The token-dropping capacity factor; a negative one means dropless, as Megatron-Core
    /// reads it (`TransformerConfig.__post_init__`).
    pub fn moe_capacity_factor(&self) -> Option<f64> {
        self.moe_expert_capacity_factor.filter(|f| *f >= 0.0)
    }

    /// Whether the MoE layer has static shapes (what full-iteration CUDA graphs capture):
    /// token dropping with padding to capacity, or a per-rank token budget.
    pub fn moe_static_shapes(&self) -> bool {
        let drop_and_pad = self.moe_capacity_factor().is_some()
            && self.moe_pad_expert_input_to_capacity.unwrap_or(false);
        drop_and_pad || self.moe_expert_rank_capacity_factor.is_some()
    }

    pub fn ep_overlap_chunks(&self) -> u32 {
        self.moe_ep_overlap_chunks.unwrap_or(1).max(1)
    }
    pub fn offloads(&self, module: &str) -> bool {
        self.offload_modules
            .as_deref()
            .unwrap_or(&[])
            .iter()
            .any(|m| m == module)
    }
    /// What CUDA graphs capture. An implementation with no scope list captures whole layers
    /// (Megatron-Core's default); `full_iteration` captures everything.
    pub fn cuda_graph_scopes(&self) -> &[CudaGraphScope] {
        const WHOLE_LAYER: &[CudaGraphScope] = &[
            CudaGraphScope::Attn,
            CudaGraphScope::Mlp,
            CudaGraphScope::Moe,
        ];
        const FULL_ITERATION: &[CudaGraphScope] = &[CudaGraphScope::FullIteration];
        match self.cuda_graph_impl {
            Some(CudaGraphImpl::Local) | Some(CudaGraphImpl::TransformerEngine) => {
                match self.cuda_graph_scope.as_deref() {
                    None | Some([]) => WHOLE_LAYER,
                    Some(scopes) => scopes,
                }
            }
            Some(CudaGraphImpl::FullIteration) => FULL_ITERATION,
            _ => &[],
        }
    }
    /// Resolved dispatcher, given the hardware's default. A run that names none takes the
    /// card's, except DeepEP where the experts are not split (expert TP × EP = 1): Megatron-Core
    /// refuses that (`MoEFlexTokenDispatcher.__init__`: "DeepEP dispatcher requires TPxEP > 1"),
    /// and there the alltoall dispatcher moves no tokens, so it is what such a run uses.
    pub fn dispatcher(&self, default: ResolvedDispatcher) -> ResolvedDispatcher {
        match self.moe_token_dispatcher_type {
            Some(TokenDispatcher::Alltoall) => ResolvedDispatcher::Alltoall,
            Some(TokenDispatcher::Allgather) => ResolvedDispatcher::Allgather,
            Some(TokenDispatcher::Flex) => match self.moe_flex_dispatcher_backend {
                Some(FlexBackend::Hybridep) => ResolvedDispatcher::Hybridep,
                Some(FlexBackend::Deepep) => ResolvedDispatcher::Deepep,
                None => match default {
                    ResolvedDispatcher::Hybridep => ResolvedDispatcher::Hybridep,
                    _ => ResolvedDispatcher::Deepep,
                },
            },
            None => match self.moe_flex_dispatcher_backend {
                Some(FlexBackend::Hybridep) => ResolvedDispatcher::Hybridep,
                Some(FlexBackend::Deepep) => ResolvedDispatcher::Deepep,
                None if default == ResolvedDispatcher::Deepep && !self.experts_split() => {
                    ResolvedDispatcher::Alltoall
                }
                None => default,
            },
        }
    }
}

/// Moment buffers per parameter of `kind`.
fn moments_of(kind: OptimizerKind) -> f64 {
    match kind {
        OptimizerKind::Adam => 2.0,
        OptimizerKind::Sgd | OptimizerKind::Muon | OptimizerKind::DistMuon => 1.0,
    }
}
