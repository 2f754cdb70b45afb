//! Portable tool schemas: one transform over every tool's `inputSchema` and `outputSchema`
//! (applied to the whole router in [`super::SkillServer::tool_router`]), so that strict
//! clients accept them: the MCP Inspector's `--strict` lint, Ajv in strict mode, and hosts
//! that map schemas onto a single-`type` dialect (the OpenAPI subset of function calling).
//!
//! schemars writes Rust-specific integer formats (`uint32`, `double`, ...), bare `true` for
//! `serde_json::Value`, and `type: [T, "null"]` for `Option<T>`. Here they become standard
//! JSON Schema with the same contract: integer ranges as `minimum`/`maximum` (the limits of
//! `src/model/limits.rs` are already there), "any JSON value" as an explicit `anyOf` of the
//! six types, nullable fields as `anyOf` branches with one `type` each.

use rmcp::model::JsonObject;
use serde_json::{json, Map, Value};

/// Keywords that take a boolean in their own right (`additionalProperties: true` is the
/// keyword's documented form, not a stray schema).
pub const BOOLEAN_VALUED: [&str; 4] = [
    "additionalProperties",
    "unevaluatedProperties",
    "additionalItems",
    "unevaluatedItems",
];

/// Keywords whose value is one subschema.
pub const SUBSCHEMA: [&str; 12] = [
    "items",
    "contains",
    "not",
    "propertyNames",
    "if",
    "then",
    "else",
    "additionalProperties",
    "unevaluatedProperties",
    "additionalItems",
    "unevaluatedItems",
    "contentSchema",
];

/// Keywords whose value is an array of subschemas.
pub const SUBSCHEMA_ARRAYS: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];

/// Keywords whose value maps names to subschemas.
pub const SUBSCHEMA_MAPS: [&str; 6] = [
    "properties",
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
    "dependencies",
];

/// JSON Schema 2020-12's keywords (core, applicator, validation, unevaluated, format,
/// content, meta-data). Anything else is dropped.
pub const STANDARD_KEYWORDS: [&str; 55] = [
    "$schema",
    "$id",
    "$ref",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "title",
    "description",
    "default",
    "examples",
];

/// Meta-data keywords also kept (2020-12 meta-data vocabulary).
const ANNOTATIONS: [&str; 3] = ["deprecated", "readOnly", "writeOnly"];

/// The formats JSON Schema 2020-12 defines; validators know these without plug-ins.
pub const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Keywords that constrain a value (the Inspector's list): a schema with none of them
/// accepts anything and is written out as the explicit any-value schema instead.
const CONSTRAINING: [&str; 38] = [
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "items",
    "prefixItems",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "$ref",
    "$dynamicRef",
];

/// Makes one tool schema portable in place.
pub fn make_portable(schema: &mut JsonObject) {
    let mut root = Value::Object(std::mem::take(schema));
    portable(&mut root, None);
    if let Value::Object(object) = root {
        *schema = object;
    }
}

/// The transform on one (sub)schema; `keyword` is the keyword it sits under.
pub fn portable(node: &mut Value, keyword: Option<&str>) {
    match node {
        Value::Bool(accept) => {
            if keyword.is_some_and(|k| BOOLEAN_VALUED.contains(&k)) {
                return;
            }
            // `true` is "any JSON value", `false` "no value"; both in object form.
            *node = if *accept {
                any_value(Map::new())
            } else {
                json!({"not": {}})
            };
        }
        Value::Object(object) => {
            object.retain(|key, _| {
                STANDARD_KEYWORDS.contains(&key.as_str()) || ANNOTATIONS.contains(&key.as_str())
            });
            standard_format(object);
            split_type_union(object);
            if keyword != Some("not") && !CONSTRAINING.iter().any(|k| object.contains_key(*k)) {
                *object = match any_value(std::mem::take(object)) {
                    Value::Object(o) => o,
                    _ => Map::new(),
                };
            }
            for_each_subschema(object, &mut |child, key| portable(child, Some(key)));
        }
        _ => {}
    }
}

/// Calls `visit` on every direct subschema of a schema object, with the keyword it sits under.
pub fn for_each_subschema(
    object: &mut Map<String, Value>,
    visit: &mut dyn FnMut(&mut Value, &str),
) {
    for (key, value) in object.iter_mut() {
        let key = key.as_str();
        if SUBSCHEMA_MAPS.contains(&key) {
            if let Value::Object(map) = value {
                for child in map.values_mut() {
                    visit(child, key);
                }
            }
        } else if SUBSCHEMA_ARRAYS.contains(&key) || (key == "items" && value.is_array()) {
            if let Value::Array(children) = value {
                for child in children {
                    visit(child, key);
                }
            }
        } else if SUBSCHEMA.contains(&key) {
            visit(value, key);
        }
    }
}

/// "Any JSON value" as one `anyOf` branch per type, keeping the annotations of `base`.
fn any_value(mut base: Map<String, Value>) -> Value {
    base.insert(
        "anyOf".into(),
        json!([
            {"type": "object"}, {"type": "array"}, {"type": "string"},
            {"type": "number"}, {"type": "boolean"}, {"type": "null"}
        ]),
    );
    Value::Object(base)
}

/// Drops formats outside JSON Schema's list; an integer format becomes its range.
fn standard_format(object: &mut Map<String, Value>) {
    let Some(Value::String(format)) = object.get("format") else {
        return;
    };
    if STANDARD_FORMATS.contains(&format.as_str()) {
        return;
    }
    let range: Option<(i64, i64)> = match format.as_str() {
        "uint8" => Some((0, i64::from(u8::MAX))),
        "uint16" => Some((0, i64::from(u16::MAX))),
        "uint32" => Some((0, i64::from(u32::MAX))),
        "int8" => Some((i64::from(i8::MIN), i64::from(i8::MAX))),
        "int16" => Some((i64::from(i16::MIN), i64::from(i16::MAX))),
        "int32" => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
        _ => None,
    };
    let unsigned = format.starts_with("uint");
    object.remove("format");
    if let Some((low, high)) = range {
        object.entry("minimum").or_insert_with(|| Value::from(low));
        object.entry("maximum").or_insert_with(|| Value::from(high));
    } else if unsigned {
        object.entry("minimum").or_insert_with(|| Value::from(0));
    }
}

/// The type each keyword applies to; keywords not listed stay on the parent.
fn keyword_types(key: &str) -> Option<&'static [&'static str]> {
    Some(match key {
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
            &["integer", "number"]
        }
        "minLength" | "maxLength" | "pattern" | "contentEncoding" | "contentMediaType"
        | "contentSchema" => &["string"],
        "format" => &["string", "integer", "number"],
        "items" | "prefixItems" | "contains" | "minContains" | "maxContains" | "minItems"
        | "maxItems" | "uniqueItems" | "unevaluatedItems" | "additionalItems" => &["array"],
        "properties"
        | "required"
        | "additionalProperties"
        | "patternProperties"
        | "propertyNames"
        | "minProperties"
        | "maxProperties"
        | "dependentRequired"
        | "dependentSchemas"
        | "unevaluatedProperties" => &["object"],
        "enum" | "const" => &[
            "null", "boolean", "object", "array", "number", "string", "integer",
        ],
        _ => return None,
    })
}

fn value_has_type(value: &Value, ty: &str) -> bool {
    match value {
        Value::Null => ty == "null",
        Value::Bool(_) => ty == "boolean",
        Value::Number(n) => ty == "number" || (ty == "integer" && (n.is_i64() || n.is_u64())),
        Value::String(_) => ty == "string",
        Value::Array(_) => ty == "array",
        Value::Object(_) => ty == "object",
    }
}

/// `type: [A, B]` becomes `anyOf: [{type: A, ...}, {type: B, ...}]`, each branch carrying the
/// keywords that apply to its type (and the `enum` values of that type).
fn split_type_union(object: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = object.get("type") else {
        return;
    };
    let types: Vec<String> = types
        .iter()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    object.remove("type");
    if let [only] = types.as_slice() {
        object.insert("type".into(), Value::from(only.as_str()));
        return;
    }
    let moved: Vec<(String, Value)> = object
        .iter()
        .filter(|(key, _)| keyword_types(key).is_some())
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    for (key, _) in &moved {
        object.remove(key);
    }
    let branches: Vec<Value> = types
        .iter()
        .map(|ty| {
            let mut branch = Map::new();
            branch.insert("type".into(), Value::from(ty.as_str()));
            for (key, value) in &moved {
                let applies = keyword_types(key).is_some_and(|t| t.contains(&ty.as_str()));
                match (key.as_str(), value) {
                    ("enum", Value::Array(values)) => {
                        let kept: Vec<Value> = values
                            .iter()
                            .filter(|v| value_has_type(v, ty))
                            .cloned()
                            .collect();
                        if ty != "null" && !kept.is_empty() {
                            branch.insert(key.clone(), Value::Array(kept));
                        }
                    }
                    ("const", v) if value_has_type(v, ty) => {
                        branch.insert(key.clone(), v.clone());
                    }
                    ("const", _) => {}
                    _ if applies => {
                        branch.insert(key.clone(), value.clone());
                    }
                    _ => {}
                }
            }
            Value::Object(branch)
        })
        .collect();
    let union = Value::Array(branches);
    match object.get_mut("anyOf") {
        // Already an `anyOf`: both must hold, so the split joins it under `allOf`.
        Some(_) => {
            let all = object
                .entry("allOf")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(all) = all {
                all.push(json!({ "anyOf": union }));
            }
        }
        None => {
            object.insert("anyOf".into(), union);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mut value: Value) -> Value {
        portable(&mut value, None);
        value
    }

    #[test]
    fn nullable_integer_becomes_branches_with_its_range() {
        let out = run(json!({"type": "object", "properties": {"tp": {
            "type": ["integer", "null"], "format": "uint32", "minimum": 1, "maximum": 64,
            "description": "TP", "default": null}}}));
        let tp = &out["properties"]["tp"];
        assert_eq!(tp["description"], "TP");
        assert!(
            tp.get("type").is_none() && tp.get("minimum").is_none(),
            "{tp}"
        );
        assert_eq!(
            tp["anyOf"],
            json!([{"type": "integer", "minimum": 1, "maximum": 64}, {"type": "null"}])
        );
    }

    #[test]
    fn formats_outside_the_standard_become_ranges_or_go() {
        let out = run(json!({"type": "object", "properties": {
            "a": {"type": "integer", "format": "uint32", "minimum": 0},
            "b": {"type": "number", "format": "double"},
            "c": {"type": "integer", "format": "uint64", "minimum": 0},
            "d": {"type": "string", "format": "date-time"}}}));
        let p = &out["properties"];
        assert_eq!(
            p["a"],
            json!({"type": "integer", "minimum": 0, "maximum": 4_294_967_295u64})
        );
        assert_eq!(p["b"], json!({"type": "number"}));
        assert_eq!(p["c"], json!({"type": "integer", "minimum": 0}));
        assert_eq!(p["d"]["format"], "date-time");
    }

    #[test]
    fn booleans_and_untyped_schemas_become_objects() {
        let out = run(json!({"type": "object", "additionalProperties": true,
            "properties": {"any": true, "never": false, "doc": {"description": "x"}},
            "$defs": {"M": {"anyOf": [{"type": "string"}, true]}}, "nullable": true}));
        assert_eq!(out["additionalProperties"], true);
        assert_eq!(
            out["properties"]["any"]["anyOf"].as_array().map(Vec::len),
            Some(6)
        );
        assert_eq!(out["properties"]["never"], json!({"not": {}}));
        assert_eq!(out["properties"]["doc"]["description"], "x");
        assert!(out["properties"]["doc"]["anyOf"].is_array());
        assert!(out["$defs"]["M"]["anyOf"][1].is_object());
        assert!(out.get("nullable").is_none());
    }

    #[test]
    fn enum_values_follow_their_branch() {
        let out = run(json!({"type": ["string", "null"], "enum": ["a", "b", null]}));
        assert_eq!(
            out["anyOf"],
            json!([{"type": "string", "enum": ["a", "b"]}, {"type": "null"}])
        );
    }
}
