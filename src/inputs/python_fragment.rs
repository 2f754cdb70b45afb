//! Python recipe code as a diff shows it: a few lines of one recipe, cut out of their function
//! and often out of their call (`    micro_batch_size=1,`). Such a fragment is not valid Python,
//! so it is parsed with tree-sitter's error recovery and read statement by statement: attribute
//! assignments (`cfg.model.context_parallel_size = 4`), keyword arguments of `replace(...)` and
//! of configuration constructors, and `name=value` lines whose call was cut off. Values are
//! evaluated with the whole-file reader's evaluator (literals, `torch` dtypes, arithmetic);
//! whatever needs more than the fragment is listed with the reason, never guessed.

use serde_json::{Map, Value};
use tree_sitter::{Node, Parser};

use super::python_recipe::{set_path, snippet, Evaluator, PythonRecipeError, RecipeFile};

/// What one side of one recipe's hunks sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FragmentSettings {
    /// Bridge override tree (`{"model": {...}}`), flat fields at the top level.
    pub tree: Value,
    /// (key or source snippet, reason) for what the fragment alone cannot evaluate.
    pub unevaluated: Vec<(String, String)>,
}

/// Reads the settings a fragment of recipe code writes.
pub fn fragment_settings(source: &str) -> Result<FragmentSettings, PythonRecipeError> {
    let text = dedent(source);
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .map_err(|e| PythonRecipeError::Grammar(e.to_string()))?;
    let tree = parser
        .parse(&text, None)
        .ok_or_else(|| PythonRecipeError::Grammar("the parser returned no tree".into()))?;
    let file = RecipeFile { source: text, tree };
    let mut reader = FragmentReader {
        eval: Evaluator::new(&file, &[]),
        out: FragmentSettings {
            tree: Value::Object(Map::new()),
            unevaluated: Vec::new(),
        },
    };
    reader.visit(file.tree.root_node());
    Ok(reader.out)
}

/// Removes the indentation every non-blank line shares, so a function body parses as
/// module-level statements.
fn dedent(source: &str) -> String {
    let indent = source
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    source
        .lines()
        .map(|l| l.get(indent..).unwrap_or_else(|| l.trim_start()))
        .collect::<Vec<_>>()
        .join("\n")
}

struct FragmentReader<'f> {
    eval: Evaluator<'f>,
    out: FragmentSettings,
}

impl<'f> FragmentReader<'f> {
    fn visit(&mut self, node: Node<'f>) {
        match node.kind() {
            "assignment" => return self.assignment(node),
            "keyword_argument" => return self.keyword(node),
            "call" if !self.is_settings_call(node) => return self.helper_call(node),
            _ => {}
        }
        let mut cursor = node.walk();
        let children: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
        for child in children {
            self.visit(child);
        }
    }

    /// `replace(...)` and `SomeConfig(...)` set fields with their keywords; other calls are
    /// helpers whose effect lies outside the diff.
    fn is_settings_call(&self, call: Node<'f>) -> bool {
        if self.eval.is_replace(call) {
            return true;
        }
        let callee = call
            .child_by_field_name("function")
            .map(|f| self.eval.text(f))
            .unwrap_or("");
        let last = callee.rsplit('.').next().unwrap_or(callee);
        last.chars().next().is_some_and(|c| c.is_ascii_uppercase())
    }

    fn helper_call(&mut self, call: Node<'f>) {
        let callee = call
            .child_by_field_name("function")
            .map(|f| self.eval.text(f))
            .unwrap_or("");
        if callee.ends_with("_mixed") || callee == "print" || callee.starts_with("logger.") {
            return;
        }
        self.out.unevaluated.push((
            snippet(self.eval.text(call)),
            format!(
                "calls `{callee}`, whose effect on the configuration is defined outside the diff"
            ),
        ));
    }

    fn assignment(&mut self, node: Node<'f>) {
        let (Some(left), Some(right)) = (
            node.child_by_field_name("left"),
            node.child_by_field_name("right"),
        ) else {
            return;
        };
        // `field=value,` cut out of its call parses as an assignment of a one-element tuple.
        let right = match right.kind() {
            "expression_list" if right.named_child_count() == 1 => {
                right.named_child(0).unwrap_or(right)
            }
            _ => right,
        };
        let path = match left.kind() {
            "attribute" => match self.eval.attribute_chain(left) {
                Some((_root, path)) => path,
                None => return,
            },
            "identifier" => vec![self.eval.text(left).to_owned()],
            // Subscripts (`cfg.env_vars["X"] = ...`) and tuple targets set no field.
            _ => return,
        };
        match self.eval.eval(right, None, 0) {
            // `NAME = replace(BASE, ...)`: the constant is the recipe, its fields are the settings.
            Ok(known) if left.kind() == "identifier" && known.value.is_object() => {
                self.merge(&[], known.value);
            }
            Ok(known) => set_path(&mut self.out.tree, &path, known.value),
            Err(reason) => {
                if right.kind() == "call" && self.is_settings_call(right) {
                    self.visit_call_keywords(right);
                }
                self.out.unevaluated.push((path.join("."), reason));
            }
        }
    }

    fn keyword(&mut self, node: Node<'f>) {
        let (Some(name), Some(value)) = (
            node.child_by_field_name("name"),
            node.child_by_field_name("value"),
        ) else {
            return;
        };
        let key = self.eval.text(name).to_owned();
        match self.eval.eval(value, None, 0) {
            Ok(known) => set_path(&mut self.out.tree, &[key], known.value),
            Err(reason) => self.out.unevaluated.push((key, reason)),
        }
    }

    /// The keywords of a settings call whose base could not be evaluated still count.
    fn visit_call_keywords(&mut self, call: Node<'f>) {
        if let Some(args) = call.child_by_field_name("arguments") {
            let mut cursor = args.walk();
            let list: Vec<Node<'f>> = args.named_children(&mut cursor).collect();
            for arg in list {
                if arg.kind() == "keyword_argument" {
                    self.keyword(arg);
                }
            }
        }
    }

    fn merge(&mut self, prefix: &[String], value: Value) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    let mut path = prefix.to_vec();
                    path.push(key);
                    self.merge(&path, inner);
                }
            }
            leaf => set_path(&mut self.out.tree, prefix, leaf),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_attribute_assignments_and_cut_keywords() {
        let read = fragment_settings(
            "    cfg.model.context_parallel_size = 4\n    cfg.train.micro_batch_size = 1\n    cfg.model.recompute_modules = None\n",
        )
        .unwrap();
        assert_eq!(
            read.tree,
            json!({"model": {"context_parallel_size": 4, "recompute_modules": null}, "train": {"micro_batch_size": 1}})
        );
        let read =
            fragment_settings("    pipeline_model_parallel_size=8,\n    micro_batch_size=2,\n)\n")
                .unwrap();
        assert_eq!(
            read.tree,
            json!({"pipeline_model_parallel_size": 8, "micro_batch_size": 2})
        );
    }

    #[test]
    fn helper_calls_and_expressions_are_listed_not_guessed() {
        let read = fragment_settings(
            "    _enable_graphs(cfg, fp8_dot_product_attention=True)\n    cfg.model.seq_length = SEQ * 2\n",
        )
        .unwrap();
        assert_eq!(read.tree, json!({}));
        let keys: Vec<&str> = read.unevaluated.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            keys.iter().any(|k| k.starts_with("_enable_graphs")),
            "{keys:?}"
        );
        assert!(keys.contains(&"model.seq_length"), "{keys:?}");
    }

    #[test]
    fn a_replace_constant_sets_its_fields() {
        let read = fragment_settings(
            "X_V2 = replace(\n    BASE,\n    pipeline_model_parallel_size=8,\n    cuda_graph_scope=[\"attn\", \"moe_router\"],\n)\n",
        )
        .unwrap();
        assert_eq!(
            read.tree,
            json!({"pipeline_model_parallel_size": 8, "cuda_graph_scope": ["attn", "moe_router"]})
        );
    }
}
