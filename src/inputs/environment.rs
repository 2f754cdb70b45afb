//! The environment variables a launch sets that the cost model reads: Transformer Engine's
//! attention switches (`NVTE_FLASH_ATTN`, `NVTE_FUSED_ATTN`, `NVTE_UNFUSED_ATTN`), which
//! Megatron-Core checks against `attention_backend` when it builds the model. The readers list
//! every environment assignment they see as ignored; this takes those switches back out.

use crate::model::config::{AttentionEnv, TrainingConfig, ATTENTION_SWITCHES};

/// Why every other environment variable a launch sets is listed as ignored.
pub const UNREAD: &str =
    "environment variable; of the environment the cost model reads only Transformer Engine's attention switches";

/// Moves the attention switches among `config`'s ignored environment assignments
/// (`export NVTE_FUSED_ATTN=0` in a script, `NVTE_FUSED_ATTN=0 torchrun …` on a command line)
/// into `attention_env`; a later assignment of the same variable wins, as in the shell.
pub fn take_attention_switches(config: &mut TrainingConfig) {
    let ignored = std::mem::take(&mut config.ignored_settings);
    for setting in ignored {
        let switch = attention_switch(&setting.key);
        match switch {
            Some((name, value)) => {
                let env = config
                    .attention_env
                    .get_or_insert_with(AttentionEnv::default);
                if let Some(slot) = env.slot(name) {
                    *slot = Some(value);
                }
            }
            None => config.ignored_settings.push(setting),
        }
    }
}

/// `NAME=value` (or `export NAME=value`) when NAME is one of the attention switches.
fn attention_switch(key: &str) -> Option<(&str, String)> {
    let assignment = key.strip_prefix("export ").unwrap_or(key).trim();
    let (name, value) = assignment.split_once('=')?;
    if !ATTENTION_SWITCHES.contains(&name) {
        return None;
    }
    let value = value.trim();
    let unquoted = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value);
    Some((name, unquoted.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::IgnoredSetting;

    #[test]
    fn the_switches_leave_the_ignored_list_and_the_rest_stays() {
        let mut config = TrainingConfig {
            ignored_settings: vec![
                IgnoredSetting::new("export NVTE_FUSED_ATTN=0", "environment variable"),
                IgnoredSetting::new("CUDA_DEVICE_MAX_CONNECTIONS=1", "environment variable"),
                IgnoredSetting::new("NVTE_FLASH_ATTN='1'", "environment variable assignment"),
                IgnoredSetting::new("export NVTE_FUSED_ATTN=1", "environment variable"),
            ],
            ..TrainingConfig::default()
        };
        take_attention_switches(&mut config);
        let env = config.attention_env.expect("switches read");
        assert_eq!(env.fused.as_deref(), Some("1"));
        assert_eq!(env.flash.as_deref(), Some("1"));
        assert_eq!(env.unfused, None);
        assert_eq!(config.ignored_settings.len(), 1);
        assert_eq!(
            config.ignored_settings[0].key,
            "CUDA_DEVICE_MAX_CONNECTIONS=1"
        );
    }
}
