//! Megatron-LM's defaults where they differ from the cost model's own. The cost model fills an
//! unset field the way the performance recipes set it (distributed optimizer, overlapped
//! data-parallel traffic, fused cross entropy, balanced routing); a whole Megatron-LM command
//! line, or a configuration that lists only what differs from Megatron Core (Megatron-Bridge's
//! configuration summary), runs Megatron's own default instead. The values come from the
//! argument list (`data/inputs/megatron-lm-arguments.yaml`), which Megatron Core's config
//! dataclasses also default these fields to.

use serde_json::Value;

use super::megatron_arguments;
use crate::model::config::{ConfigError, TrainingConfig};

/// One argument whose Megatron default differs from the cost model's assumption.
pub struct DefaultOverRecipes {
    /// The argument's `dest`, which is also the configuration field.
    pub dest: &'static str,
    /// The Megatron-Bridge configuration section holding the field.
    pub section: &'static str,
    /// Whether it matters only for models with experts.
    pub moe_only: bool,
    /// What the default does, and the flag that changes it.
    pub effect: &'static str,
}

pub const MEGATRON_DEFAULTS_OVER_RECIPES: &[DefaultOverRecipes] = &[
    DefaultOverRecipes {
        dest: "use_distributed_optimizer",
        section: "ddp",
        moe_only: false,
        effect: "every data-parallel rank keeps the whole optimizer state \
                 (Float16OptimizerWithFloat16Params); --use-distributed-optimizer shards it",
    },
    DefaultOverRecipes {
        dest: "overlap_grad_reduce",
        section: "ddp",
        moe_only: false,
        effect: "the gradient reduction runs after the last backward, exposed, as one bucket; \
                 --overlap-grad-reduce hides it behind the backward",
    },
    DefaultOverRecipes {
        dest: "overlap_param_gather",
        section: "ddp",
        moe_only: false,
        effect: "the distributed optimizer's parameter all-gather runs exposed after the \
                 optimizer step; --overlap-param-gather hides it behind the next forward",
    },
    DefaultOverRecipes {
        dest: "sequence_parallel",
        section: "model",
        moe_only: false,
        effect: "with TP > 1 every tensor-parallel rank keeps the layer's activations whole \
                 between its TP regions; --sequence-parallel splits them over TP (Megatron \
                 Core requires it where TP and EP are both above 1)",
    },
    DefaultOverRecipes {
        dest: "cross_entropy_loss_fusion",
        section: "model",
        moe_only: false,
        effect: "the unfused cross entropy keeps more logit-sized buffers; \
                 --cross-entropy-loss-fusion fuses it",
    },
    DefaultOverRecipes {
        dest: "moe_token_dispatcher_type",
        section: "model",
        moe_only: true,
        effect: "the allgather dispatcher gathers every token of the expert-parallel group; \
                 alltoall or flex (DeepEP, HybridEP) send each token where it goes",
    },
    DefaultOverRecipes {
        dest: "moe_router_force_load_balancing",
        section: "model",
        moe_only: true,
        effect: "the router's own routing, as in real training; the estimate prices balanced \
                 experts and its band says what runs with the router's own routing reached",
    },
];

/// Megatron-LM's option string and default value for `dest`, when the argument list gives a
/// literal default.
pub fn megatron_default(dest: &str) -> Result<Option<(String, Value)>, ConfigError> {
    let Some(arg) = megatron_arguments()?.by_dest(dest) else {
        return Ok(None);
    };
    let Some(default) = arg.default.clone().filter(|d| !d.is_null()) else {
        return Ok(None);
    };
    let option = arg.options.first().map_or(dest, String::as_str).to_string();
    Ok(Some((option, default)))
}

/// Sets off one of the switches above that the cost model would otherwise assume on (an
/// argument dump's `False`, which no command-line flag can state).
pub fn set_switch_off(config: &mut TrainingConfig, dest: &str) {
    let field = match dest {
        "use_distributed_optimizer" => &mut config.use_distributed_optimizer,
        "sequence_parallel" => &mut config.sequence_parallel,
        "overlap_grad_reduce" => &mut config.overlap_grad_reduce,
        "overlap_param_gather" => &mut config.overlap_param_gather,
        "cross_entropy_loss_fusion" => &mut config.cross_entropy_loss_fusion,
        "moe_router_force_load_balancing" => &mut config.moe_router_force_load_balancing,
        _ => return,
    };
    field.get_or_insert(false);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_switch_listed_can_be_set_off_and_has_a_megatron_default() {
        for entry in MEGATRON_DEFAULTS_OVER_RECIPES {
            let (option, default) = megatron_default(entry.dest).unwrap().unwrap();
            assert!(option.starts_with("--"), "{option}");
            if default != Value::Bool(false) {
                continue;
            }
            let mut config = TrainingConfig::default();
            set_switch_off(&mut config, entry.dest);
            let fields = serde_json::to_value(&config).unwrap();
            assert_eq!(fields[entry.dest], Value::Bool(false), "{}", entry.dest);
        }
    }
}
