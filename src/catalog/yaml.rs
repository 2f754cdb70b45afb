//! YAML -> JSON conversion that keeps every value the author wrote.
//!
//! Frontmatter goes out verbatim in `skills/list`, and hosts compare it field by field with
//! what their own parser makes of SKILL.md, so the conversion must not invent or drop values.

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

/// Convert a parsed YAML value to JSON.
///
/// Non-string mapping keys become their YAML text (`1: x` -> `"1"`); tags are dropped and
/// the tagged value kept; floats that JSON cannot hold (`.nan`, `.inf`) become strings.
pub fn yaml_to_json(value: &Yaml) -> Json {
    match value {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(*b),
        Yaml::Number(n) => number_to_json(n),
        Yaml::String(s) => Json::String(s.clone()),
        Yaml::Sequence(items) => Json::Array(items.iter().map(yaml_to_json).collect()),
        Yaml::Mapping(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (key, item) in map {
                out.insert(yaml_key_to_string(key), yaml_to_json(item));
            }
            Json::Object(out)
        }
        Yaml::Tagged(tagged) => yaml_to_json(&tagged.value),
    }
}

fn number_to_json(n: &serde_yaml::Number) -> Json {
    if let Some(i) = n.as_i64() {
        Json::from(i)
    } else if let Some(u) = n.as_u64() {
        Json::from(u)
    } else if let Some(f) = n.as_f64() {
        serde_json::Number::from_f64(f)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(n.to_string()))
    } else {
        Json::String(n.to_string())
    }
}

/// The text of a scalar used as a mapping key, or a compact rendering of anything else.
pub fn yaml_key_to_string(key: &Yaml) -> String {
    match key {
        Yaml::String(s) => s.clone(),
        Yaml::Null => "null".to_owned(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Number(n) => n.to_string(),
        other => yaml_to_json(other).to_string(),
    }
}

/// A scalar rendered as text (`~300` stays "~300", `299.352` becomes "299.352"); `None` for
/// sequences, mappings and null.
pub fn yaml_scalar_text(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Bool(b) => Some(b.to_string()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Tagged(tagged) => yaml_scalar_text(&tagged.value),
        Yaml::Null | Yaml::Sequence(_) | Yaml::Mapping(_) => None,
    }
}

/// 1-based line of a YAML error, if the parser reported one.
pub fn yaml_error_line(error: &serde_yaml::Error) -> Option<usize> {
    error.location().map(|location| location.line())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_approximate_numbers_as_strings_and_floats_as_numbers() {
        let yaml: Yaml =
            serde_yaml::from_str("a: ~300\nb: 299.352\nc: 4096\nd: \"~15%\"\ne: yes\n")
                .expect("valid yaml");
        let json = yaml_to_json(&yaml);
        assert_eq!(json["a"], Json::String("~300".into()));
        assert_eq!(json["b"], serde_json::json!(299.352));
        assert_eq!(json["c"], serde_json::json!(4096));
        assert_eq!(json["d"], Json::String("~15%".into()));
        // YAML 1.2: `yes` is a string, not a boolean.
        assert_eq!(json["e"], Json::String("yes".into()));
    }

    #[test]
    fn non_string_keys_become_text() {
        let yaml: Yaml = serde_yaml::from_str("1: one\ntrue: t\n").expect("valid yaml");
        let json = yaml_to_json(&yaml);
        assert_eq!(json["1"], "one");
        assert_eq!(json["true"], "t");
    }

    #[test]
    fn non_finite_floats_become_strings() {
        let yaml: Yaml = serde_yaml::from_str("a: .nan\nb: .inf\n").expect("valid yaml");
        let json = yaml_to_json(&yaml);
        assert!(json["a"].is_string());
        assert!(json["b"].is_string());
    }

    #[test]
    fn error_lines_are_one_based() {
        let error = serde_yaml::from_str::<Yaml>("a: 1\nb: [unclosed\n").expect_err("broken");
        assert!(matches!(yaml_error_line(&error), Some(2) | Some(3)));
    }
}
