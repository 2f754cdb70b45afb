//! The Python built-ins recipe helpers use to inspect a configuration before changing it
//! (`getattr(cfg.model, "moe_flex_dispatcher_backend", None) == "hybridep"`,
//! `hasattr(cfg.model, "x")`, `isinstance(n, int)`), answered from what the
//! file set. An attribute the file did not set is not assumed absent: the configuration class
//! may define it with a default, which is not in the file, so the answer is "not known".

use serde_json::Value;
use tree_sitter::Node;

use super::{snippet, Eval, Evaluator, Frame, Known};

impl<'f> Evaluator<'f> {
    /// The value of a call to `getattr`, `hasattr` or `isinstance`, or `None` when `callee` is
    /// none of them.
    pub(super) fn builtin(
        &mut self,
        callee: &str,
        call: Node<'f>,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Option<Eval> {
        if !matches!(callee, "getattr" | "hasattr" | "isinstance") {
            return None;
        }
        let args = call.child_by_field_name("arguments")?;
        let mut cursor = args.walk();
        let list: Vec<Node<'f>> = args
            .named_children(&mut cursor)
            .filter(|n| n.kind() != "comment")
            .collect();
        let text = snippet(self.text(call));
        if list.iter().any(|n| n.kind() == "keyword_argument") {
            return Some(Err(format!("`{text}` is not evaluated")));
        }
        Some(match (callee, list.as_slice()) {
            ("getattr", [object, name] | [object, name, _]) => {
                self.attribute_of(*object, *name, frame, depth)
            }
            ("hasattr", [object, name]) => self
                .attribute_of(*object, *name, frame, depth)
                .map(|_| Known::plain(Value::Bool(true))),
            ("isinstance", [value, class]) => self.is_instance(*value, *class, frame, depth),
            _ => Err(format!("`{text}` is not evaluated")),
        })
    }

    /// `object.<name>` for `getattr`/`hasattr`, when the file set it.
    fn attribute_of(
        &mut self,
        object: Node<'f>,
        name: Node<'f>,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Eval {
        let field = self.string(name)?;
        let base = self.eval(object, frame, depth)?;
        match base.value.get(&field) {
            Some(value) => Ok(Known::plain(value.clone())),
            None => Err(format!(
                "`{}.{field}` is not set in the file; its class default is defined elsewhere",
                snippet(self.text(object))
            )),
        }
    }

    /// `isinstance(value, T)` for the numeric built-in types and None (a tuple of them too).
    fn is_instance(
        &mut self,
        value: Node<'f>,
        class: Node<'f>,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Eval {
        let classes: Vec<Node<'f>> = if class.kind() == "tuple" {
            let mut cursor = class.walk();
            class.named_children(&mut cursor).collect()
        } else {
            vec![class]
        };
        let value = self.eval(value, frame, depth)?.value;
        let mut holds = false;
        for class in classes {
            let name = self.text(class);
            // Only types whose values this reader holds as Python does: a string here may
            // stand for an object (`bf16_mixed` for the precision recipe it names), a mapping
            // for a configuration class, a list for a tuple.
            let matches = match name {
                // Python's bool is a subclass of int.
                "int" => value.is_i64() || value.is_u64() || value.is_boolean(),
                "bool" => value.is_boolean(),
                "float" => value.is_f64(),
                "type(None)" | "NoneType" => value.is_null(),
                _ => {
                    return Err(format!(
                        "`isinstance(..., {name})` is not evaluated (only int, bool, float and None are)"
                    ))
                }
            };
            holds |= matches;
        }
        Ok(Known::plain(Value::Bool(holds)))
    }
}
