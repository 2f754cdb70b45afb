//! Skill cards (`card.yaml`): a typed core every card shares plus the raw YAML for the rest.
//!
//! Cards have no schema upstream; only the keys below are common to all of them, and even
//! those vary in shape, so the typed core is filled leniently and shape problems are
//! reported as warnings while the raw value keeps everything.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_yaml::Value as Yaml;

use super::yaml::{yaml_error_line, yaml_key_to_string, yaml_scalar_text, yaml_to_json};

/// A parsed card.yaml.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkillCard {
    pub title: Option<String>,
    pub summary: Option<String>,
    /// Kept as written (`"2026-04-01"`).
    pub validated_on: Option<String>,
    /// Claim id -> tags (`measured`, `code_verified`, ...).
    pub validation_status: BTreeMap<String, Vec<String>>,
    pub evidence: Vec<String>,
    pub known_limitations: Vec<String>,
    pub known_constraints: Vec<String>,
    pub follow_up_validation: Vec<String>,
    pub enable_when: Vec<String>,
    pub avoid_when: Vec<String>,
    /// The whole card as written.
    #[serde(skip)]
    pub raw: Yaml,
    /// The whole card converted to JSON (what `read_skill` with `card: true` returns).
    #[serde(skip)]
    pub json: serde_json::Value,
}

/// A card that could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    #[error("line {line}: invalid YAML: {message}")]
    Yaml { line: usize, message: String },
    #[error("line 1: a card must be a mapping of keys to values, found {found}")]
    NotAMapping { found: &'static str },
}

impl CardError {
    pub fn line(&self) -> usize {
        match self {
            Self::Yaml { line, .. } => *line,
            Self::NotAMapping { .. } => 1,
        }
    }
}

/// A card parsed, with shape warnings for the typed core (`(1-based line, message)`).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCard {
    pub card: SkillCard,
    pub warnings: Vec<(Option<usize>, String)>,
}

fn kind(value: &Yaml) -> &'static str {
    match value {
        Yaml::Null => "null",
        Yaml::Bool(_) => "a boolean",
        Yaml::Number(_) => "a number",
        Yaml::String(_) => "a string",
        Yaml::Sequence(_) => "a list",
        Yaml::Mapping(_) => "a mapping",
        Yaml::Tagged(_) => "a tagged value",
    }
}

fn key_line(text: &str, key: &str) -> Option<usize> {
    text.lines().enumerate().find_map(|(index, line)| {
        let rest = line.strip_prefix(key)?;
        rest.trim_start().starts_with(':').then_some(index + 1)
    })
}

/// Text of any value: scalars as written, anything else as compact JSON.
fn any_text(value: &Yaml) -> String {
    yaml_scalar_text(value).unwrap_or_else(|| yaml_to_json(value).to_string())
}

/// Parse card.yaml text. Never panics.
pub fn parse_card(text: &str) -> Result<ParsedCard, CardError> {
    let raw: Yaml = serde_yaml::from_str(text).map_err(|error| CardError::Yaml {
        line: yaml_error_line(&error).unwrap_or(1),
        message: error.to_string(),
    })?;
    let Yaml::Mapping(map) = &raw else {
        return Err(CardError::NotAMapping { found: kind(&raw) });
    };
    let mut warnings = Vec::new();
    let mut warn = |key: &str, message: String| warnings.push((key_line(text, key), message));

    let mut scalar = |key: &str| -> Option<String> {
        let value = map.get(key)?;
        match yaml_scalar_text(value) {
            Some(text) => Some(text.trim().to_owned()),
            None => {
                warn(
                    key,
                    format!("`{key}` should be text, found {}", kind(value)),
                );
                None
            }
        }
    };
    let title = scalar("title");
    let summary = scalar("summary");
    let validated_on = scalar("validated_on");

    let mut warnings_list = Vec::new();
    let mut list = |key: &str| -> Vec<String> {
        match map.get(key) {
            None | Some(Yaml::Null) => Vec::new(),
            Some(Yaml::Sequence(items)) => items.iter().map(any_text).collect(),
            Some(value @ (Yaml::String(_) | Yaml::Number(_) | Yaml::Bool(_))) => {
                vec![any_text(value)]
            }
            Some(value) => {
                warnings_list.push((
                    key_line(text, key),
                    format!("`{key}` should be a list, found {}", kind(value)),
                ));
                Vec::new()
            }
        }
    };
    let evidence = list("evidence");
    let known_limitations = list("known_limitations");
    let known_constraints = list("known_constraints");
    let follow_up_validation = list("follow_up_validation");
    let enable_when = list("enable_when");
    let avoid_when = list("avoid_when");
    warnings.extend(warnings_list);

    let mut validation_status = BTreeMap::new();
    match map.get("validation_status") {
        None | Some(Yaml::Null) => {}
        Some(Yaml::Mapping(claims)) => {
            for (claim, tags) in claims {
                let tags = match tags {
                    Yaml::Sequence(items) => items.iter().map(any_text).collect(),
                    Yaml::Null => Vec::new(),
                    other => vec![any_text(other)],
                };
                validation_status.insert(yaml_key_to_string(claim), tags);
            }
        }
        Some(other) => warnings.push((
            key_line(text, "validation_status"),
            format!(
                "`validation_status` should map claim ids to lists of tags, found {}",
                kind(other)
            ),
        )),
    }

    let json = yaml_to_json(&raw);
    Ok(ParsedCard {
        card: SkillCard {
            title,
            summary,
            validated_on,
            validation_status,
            evidence,
            known_limitations,
            known_constraints,
            follow_up_validation,
            enable_when,
            avoid_when,
            raw,
            json,
        },
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG_CONTEXT_LIKE: &str = r#"title: moe_long_context
validated_on: "2026-04-01"
summary: >
  Empirical guide for scaling MoE training
  to long context.
validation_status:
  dsv3_h100_cp_scaling:
    - measured
  other: code_verified # file:line
cp_scaling_data:
  - model: "DSV3 685B w/ MTP"
    hardware: "256×H100"
    entries:
      - {seq_len: 4096, cp: 1, dp: 32, tflops: ~300, mfu: "~15%"}
      - {seq_len: 16384, cp: 4, tflops: 299.352}
best_configs:
  dsv3_h100:
    parallelism: "TP2 EP64 PP8 VPP4"
    batch: "MBS1 GBS8192"
interactions:
  - {name: a, constraint: b}
evidence:
  - "[MoE Perf] tracker"
known_limitations:
  - CP does not reduce EP degree
"#;

    #[test]
    fn loads_the_typed_core_and_keeps_raw_shapes() {
        let parsed = parse_card(LONG_CONTEXT_LIKE).expect("valid card");
        let card = parsed.card;
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        assert_eq!(card.title.as_deref(), Some("moe_long_context"));
        assert_eq!(card.validated_on.as_deref(), Some("2026-04-01"));
        assert_eq!(
            card.summary.as_deref(),
            Some("Empirical guide for scaling MoE training to long context.")
        );
        assert_eq!(card.validation_status["dsv3_h100_cp_scaling"], ["measured"]);
        assert_eq!(card.validation_status["other"], ["code_verified"]);
        assert_eq!(card.evidence, ["[MoE Perf] tracker"]);
        let entries = &card.json["cp_scaling_data"][0]["entries"];
        assert_eq!(entries[0]["tflops"], "~300");
        assert_eq!(entries[1]["tflops"], serde_json::json!(299.352));
        assert_eq!(
            card.json["best_configs"]["dsv3_h100"]["parallelism"],
            "TP2 EP64 PP8 VPP4"
        );
    }

    #[test]
    fn wrong_shapes_are_warnings_not_errors() {
        let parsed = parse_card("title: [a, b]\nevidence: {a: 1}\n").expect("loads");
        assert_eq!(parsed.card.title, None);
        assert_eq!(parsed.warnings.len(), 2);
        assert_eq!(parsed.warnings[0].0, Some(1));
    }

    #[test]
    fn broken_yaml_and_non_mapping_are_errors() {
        assert!(matches!(parse_card("a: [1\n"), Err(CardError::Yaml { .. })));
        assert_eq!(
            parse_card("- a\n- b\n"),
            Err(CardError::NotAMapping { found: "a list" })
        );
    }
}
