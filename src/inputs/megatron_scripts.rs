//! What a Megatron-LM command line leaves to the files it names: which kind of model its
//! training script trains, and the vocabulary of the fixed tokenizers its `--tokenizer-type`
//! names (`data/inputs/megatron-lm-tokenizers.yaml`).

use std::sync::OnceLock;

use serde::Deserialize;

use crate::model::arch::hybrid_symbol_kind;
use crate::model::config::ConfigError;

const TOKENIZERS_YAML: &str = include_str!("../../data/inputs/megatron-lm-tokenizers.yaml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizerFile {
    tokenizers: Vec<Tokenizer>,
    script_defaults: Vec<ScriptTokenizer>,
}

/// A training script that sets `--tokenizer-type`'s default itself, with where it does.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTokenizer {
    pub script: String,
    pub tokenizer_type: String,
    pub source: String,
}

/// One fixed tokenizer and its vocabulary, with where the size comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tokenizer {
    #[serde(rename = "type")]
    pub tokenizer_type: String,
    pub vocab_size: u64,
    pub source: String,
}

fn tokenizer_file() -> Result<&'static TokenizerFile, ConfigError> {
    static FILE: OnceLock<Result<TokenizerFile, String>> = OnceLock::new();
    FILE.get_or_init(|| serde_yaml::from_str(TOKENIZERS_YAML).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| ConfigError::Parse(format!("embedded tokenizer list: {e}")))
}

/// The vocabulary of `--tokenizer-type NAME` when it is one of the fixed tokenizers.
pub fn fixed_tokenizer(name: &str) -> Result<Option<&'static Tokenizer>, ConfigError> {
    Ok(tokenizer_file()?
        .tokenizers
        .iter()
        .find(|t| t.tokenizer_type == name))
}

/// The `--tokenizer-type` default the training script `script` (a path or a file name) sets
/// itself, when it is one of the scripts listed.
pub fn script_tokenizer(script: &str) -> Result<Option<&'static ScriptTokenizer>, ConfigError> {
    let name = script.rsplit('/').next().unwrap_or(script);
    Ok(tokenizer_file()?
        .script_defaults
        .iter()
        .find(|t| t.script == name))
}

/// Megatron-LM's training scripts for models other than decoder-only transformers, with what
/// they train. The cost model prices what `pretrain_gpt.py` trains; a line running one of
/// these is refused rather than priced as a GPT model.
const OTHER_TRAINERS: &[(&str, &str)] = &[
    (
        "pretrain_bert.py",
        "BERT (an encoder with a masked-LM head)",
    ),
    ("pretrain_t5.py", "T5 (an encoder-decoder)"),
    (
        "pretrain_retro.py",
        "RETRO (a decoder with retrieval chunks and an encoder)",
    ),
    ("pretrain_ict.py", "an ICT retriever (two BERT encoders)"),
    (
        "pretrain_vlm.py",
        "a vision-language model (a vision encoder beside the decoder)",
    ),
    ("pretrain_vision_classify.py", "a vision transformer"),
    ("pretrain_vision_dino.py", "a vision transformer"),
    ("pretrain_vision_inpaint.py", "a vision transformer"),
];

/// An error when `script` is one of Megatron-LM's trainers for another kind of model.
pub fn check_trainer(script: &str) -> Result<(), ConfigError> {
    let name = script.rsplit('/').next().unwrap_or(script);
    match OTHER_TRAINERS.iter().find(|(file, _)| *file == name) {
        Some((_, trains)) => Err(ConfigError::InvalidValue {
            key: script.to_string(),
            message: format!(
                "this training script trains {trains}; the cost model prices decoder-only \
                 transformers, as pretrain_gpt.py trains, so it cannot price this run"
            ),
        }),
        None => Ok(()),
    }
}

/// An error when a HybridModel layer pattern (`--hybrid-layer-pattern`, pretrain_hybrid.py)
/// holds a layer the cost model does not price, or multi-token-prediction depths: the symbols of
/// Megatron-Core's megatron/core/models/hybrid/hybrid_layer_allocation.py (`Symbols`,
/// Megatron-LM d98e8a64): `M` Mamba-2, `*` attention, `-` MLP, `E` MoE and `|` a pipeline-stage
/// boundary are priced; `G` (Gated DeltaNet), `D` (DeepSeek sparse attention), `+` (MLA) and
/// `/` (MTP depths) are not.
pub fn check_hybrid_pattern(option: &str, pattern: &str) -> Result<(), ConfigError> {
    let refuse = |message: String| {
        Err(ConfigError::InvalidValue {
            key: option.to_string(),
            message,
        })
    };
    if pattern.contains('/') {
        return refuse(
            "the pattern holds multi-token-prediction depths (`/`), which the cost model does not \
             price in a hybrid model; drop them or name a model card"
                .to_string(),
        );
    }
    match pattern
        .chars()
        .find(|&c| c != '|' && u8::try_from(c).ok().and_then(hybrid_symbol_kind).is_none())
    {
        Some(symbol) => refuse(format!(
            "`{symbol}` is not a layer the cost model prices in a hybrid pattern (M Mamba-2, * \
             attention, - MLP, E MoE, | a stage boundary); name a model card or give the \
             model's config.json as `model`"
        )),
        None if pattern.is_empty() => refuse("the pattern is empty".to_string()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_tokenizers_and_other_trainers() {
        let gpt2 = fixed_tokenizer("GPT2BPETokenizer").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gpt2.map(|t| t.vocab_size), Some(50257));
        assert!(fixed_tokenizer("HuggingFaceTokenizer")
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none());
        let gpt = script_tokenizer("/workspace/megatron-lm/pretrain_gpt.py")
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|s| s.tokenizer_type.as_str());
        assert_eq!(gpt, Some("GPT2BPETokenizer"));
        assert!(script_tokenizer("examples/mimo/train.py")
            .unwrap_or_else(|e| panic!("{e}"))
            .is_none());
        assert!(check_trainer("pretrain_gpt.py").is_ok());
        assert!(check_trainer("/workspace/examples/mimo/train.py").is_ok());
        let err = check_trainer("/opt/megatron/pretrain_t5.py")
            .unwrap_err()
            .to_string();
        assert!(err.contains("encoder-decoder"), "{err}");
    }
}
