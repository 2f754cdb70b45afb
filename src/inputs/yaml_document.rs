//! A YAML (or JSON) document as the readers take it: YAML 1.1 merge keys applied
//! (`<<: *base` copies the anchored mapping's keys under the ones written beside it), as
//! PyYAML's `safe_load` does for the Python tools that write and read these files. Megatron-LM's
//! functional-test run files share arguments that way (`MODEL_ARGS: {<<: *BASE_MODEL_ARGS, …}`);
//! read without it, `<<` would be a key of its own. A key written twice keeps its last value,
//! as PyYAML keeps it (Megatron-LM's run files have such repeats).

use serde_json::{Map, Value};

/// The merge key.
const MERGE: &str = "<<";

/// Parses `text` and applies its merge keys.
pub fn parse_yaml_document(text: &str) -> Result<Value, serde_yaml::Error> {
    let mut document: Value = serde_yaml::from_str(text)?;
    apply_merges(&mut document);
    Ok(document)
}

/// Replaces every `<<` entry by the keys of the mapping (or mappings, the first winning) it
/// holds that the mapping it stands in does not write itself. The aliases are already
/// resolved: `<<` holds a copy of the anchored mapping. A `<<` holding anything else is left as
/// a key, for the reader to report.
fn apply_merges(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for child in map.values_mut() {
                apply_merges(child);
            }
            let sources: Vec<Map<String, Value>> = match map.get(MERGE) {
                Some(Value::Object(source)) => vec![source.clone()],
                Some(Value::Array(items)) if items.iter().all(Value::is_object) => items
                    .iter()
                    .filter_map(|item| item.as_object().cloned())
                    .collect(),
                _ => return,
            };
            map.remove(MERGE);
            for source in sources {
                for (key, merged) in source {
                    map.entry(key).or_insert(merged);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(apply_merges),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Value {
        parse_yaml_document(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn merge_keys_copy_the_anchored_mapping_under_the_keys_beside_them() {
        let value = parse(
            "BASE: &BASE\n  --num-layers: 32\n  --seq-length: 512\n\
             MODEL_ARGS:\n  <<: *BASE\n  --seq-length: 4096\n",
        );
        assert_eq!(
            value["MODEL_ARGS"],
            json!({"--num-layers": 32, "--seq-length": 4096})
        );
    }

    #[test]
    fn a_list_of_merges_lets_the_first_win() {
        let value = parse("A: &A {x: 1, y: 1}\nB: &B {y: 2, z: 2}\nC:\n  <<: [*A, *B]\n");
        assert_eq!(value["C"], json!({"x": 1, "y": 1, "z": 2}));
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_and_a_scalar_merge_stays_a_key() {
        assert_eq!(parse("A:\n  x: 1\n  x: 2\n")["A"], json!({"x": 2}));
        assert_eq!(parse("A:\n  <<: 3\n")["A"], json!({"<<": 3}));
    }

    #[test]
    fn json_reads_as_before() {
        assert_eq!(
            parse("{\"tensor_model_parallel_size\": 2}"),
            json!({"tensor_model_parallel_size": 2})
        );
    }
}
