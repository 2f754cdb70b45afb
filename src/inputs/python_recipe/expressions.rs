//! Expressions: names, attributes, subscripts, literals (strings, numbers, dictionaries,
//! lists), comparisons and operators, and a call's arguments bound to its parameters.

use super::*;

impl<'f> Evaluator<'f> {
    /// Evaluated arguments of a call, and for each the parameter it binds (by position or
    /// keyword) with its source node.
    #[allow(clippy::type_complexity)]
    pub(super) fn call_arguments(
        &mut self,
        call: Node<'f>,
        frame: &Frame<'f>,
        def_params: &[String],
        depth: usize,
    ) -> (
        Vec<Binding>,
        Vec<(String, Binding)>,
        Vec<(Option<String>, Node<'f>)>,
    ) {
        let mut positional = Vec::new();
        let mut keywords = Vec::new();
        let mut nodes = Vec::new();
        let Some(args) = call.child_by_field_name("arguments") else {
            return (positional, keywords, nodes);
        };
        let mut cursor = args.walk();
        let list: Vec<Node<'f>> = args.named_children(&mut cursor).collect();
        for arg in list {
            let eval_binding =
                |this: &mut Self, node: Node<'f>| match this.eval(node, Some(frame), depth) {
                    Ok(k) => Binding::Known(k),
                    Err(reason) => Binding::Unknown(reason),
                };
            match arg.kind() {
                "keyword_argument" => {
                    let (Some(name), Some(value)) = (
                        arg.child_by_field_name("name"),
                        arg.child_by_field_name("value"),
                    ) else {
                        continue;
                    };
                    let name = self.text(name).to_owned();
                    let binding = eval_binding(self, value);
                    nodes.push((Some(name.clone()), value));
                    keywords.push((name, binding));
                }
                "list_splat" | "dictionary_splat" | "comment" => {}
                _ => {
                    let binding = eval_binding(self, arg);
                    nodes.push((def_params.get(positional.len()).cloned(), arg));
                    positional.push(binding);
                }
            }
        }
        (positional, keywords, nodes)
    }

    pub(super) fn positional_parameter_names(&self, def: Node<'f>) -> Vec<String> {
        let mut names = Vec::new();
        let Some(params) = def.child_by_field_name("parameters") else {
            return names;
        };
        let mut cursor = params.walk();
        for param in params.named_children(&mut cursor) {
            let node = match param.kind() {
                "identifier" => Some(param),
                "typed_parameter" => first_identifier(param),
                "default_parameter" | "typed_default_parameter" => {
                    param.child_by_field_name("name")
                }
                _ => break,
            };
            if let Some(node) = node {
                names.push(self.text(node).to_owned());
            }
        }
        names
    }

    /// `a.b.c` as ("a", ["b", "c"]) when the chain starts at a plain name.
    pub(in crate::inputs) fn attribute_chain(
        &self,
        node: Node<'f>,
    ) -> Option<(String, Vec<String>)> {
        let mut path = Vec::new();
        let mut current = node;
        loop {
            match current.kind() {
                "attribute" => {
                    path.push(
                        self.text(current.child_by_field_name("attribute")?)
                            .to_owned(),
                    );
                    current = current.child_by_field_name("object")?;
                }
                "identifier" => {
                    path.reverse();
                    return Some((self.text(current).to_owned(), path));
                }
                _ => return None,
            }
        }
    }

    /// For `cfg.env_vars["X"]`, the local and the attribute path the subscript lies in.
    pub(super) fn subscript_root(&self, node: Node<'f>) -> Option<(String, Vec<String>)> {
        let object = node.child_by_field_name("value")?;
        match object.kind() {
            "identifier" => Some((self.text(object).to_owned(), Vec::new())),
            "attribute" => self.attribute_chain(object),
            "subscript" => self.subscript_root(object),
            _ => None,
        }
    }

    // ----- expressions ----------------------------------------------------------------------

    pub(in crate::inputs) fn eval(
        &mut self,
        node: Node<'f>,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Eval {
        if depth > MAX_DEPTH {
            return Err("the expression nests too deeply to evaluate".into());
        }
        let depth = depth.saturating_add(1);
        let text = self.text(node);
        match node.kind() {
            "none" => Ok(Known::plain(Value::Null)),
            "true" => Ok(Known::plain(Value::Bool(true))),
            "false" => Ok(Known::plain(Value::Bool(false))),
            "integer" => parse_int(text).map(|i| Known::plain(Value::from(i))),
            "float" => parse_float(text).map(|f| Known::plain(Value::Number(f))),
            "string" => self.string(node).map(|s| Known::plain(Value::String(s))),
            "concatenated_string" => {
                let mut out = String::new();
                let mut cursor = node.walk();
                let parts: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
                for part in parts {
                    out.push_str(&self.string(part)?);
                }
                Ok(Known::plain(Value::String(out)))
            }
            "parenthesized_expression" => match single_named_child(node) {
                Some(inner) => self.eval(inner, frame, depth),
                None => Err(format!("`{}` is not evaluated", snippet(text))),
            },
            // `return a, b` is an expression list: a tuple without parentheses.
            "list" | "tuple" | "expression_list" => {
                let mut items = Vec::new();
                let mut gaps = Vec::new();
                let mut cursor = node.walk();
                let children: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
                for child in children {
                    if child.kind() == "comment" {
                        continue;
                    }
                    if child.kind() == "list_splat" {
                        return Err(format!("`{}` unpacks a sequence", snippet(text)));
                    }
                    let item = self.eval(child, frame, depth)?;
                    // An item's gaps (a constructor's unnamed fields) stay with it, by index.
                    let index = [items.len().to_string()];
                    gaps.extend(item.gaps.into_iter().map(|g| g.prefixed(&index)));
                    items.push(item.value);
                }
                Ok(Known {
                    value: Value::Array(items),
                    gaps,
                })
            }
            "dictionary" => self.dictionary(node, frame, depth),
            "subscript" => self.subscript_value(node, frame, depth),
            "identifier" => self.name(text, frame, depth),
            "attribute" => self.attribute(node, frame, depth),
            "unary_operator" => {
                let operand = node
                    .child_by_field_name("argument")
                    .ok_or_else(|| format!("`{}` is incomplete", snippet(text)))?;
                let value = self.eval(operand, frame, depth)?.value;
                let op = node
                    .child_by_field_name("operator")
                    .map(|o| self.text(o))
                    .unwrap_or("");
                unary(op, &value)
                    .map(Known::plain)
                    .ok_or_else(|| format!("`{}` is not evaluated", snippet(text)))
            }
            "not_operator" => {
                let operand = node
                    .child_by_field_name("argument")
                    .ok_or_else(|| format!("`{}` is incomplete", snippet(text)))?;
                let value = self.eval(operand, frame, depth)?.value;
                Ok(Known::plain(Value::Bool(!truthy(&value))))
            }
            "binary_operator" => {
                let (Some(l), Some(r), Some(op)) = (
                    node.child_by_field_name("left"),
                    node.child_by_field_name("right"),
                    node.child_by_field_name("operator"),
                ) else {
                    return Err(format!("`{}` is incomplete", snippet(text)));
                };
                let left = self.eval(l, frame, depth)?.value;
                let right = self.eval(r, frame, depth)?.value;
                binary(self.text(op), &left, &right)
                    .map(Known::plain)
                    .map_err(|why| format!("`{}`: {why}", snippet(text)))
            }
            "boolean_operator" => {
                let (Some(l), Some(r), Some(op)) = (
                    node.child_by_field_name("left"),
                    node.child_by_field_name("right"),
                    node.child_by_field_name("operator"),
                ) else {
                    return Err(format!("`{}` is incomplete", snippet(text)));
                };
                let left = self.eval(l, frame, depth)?;
                let short = match self.text(op) {
                    "and" => !truthy(&left.value),
                    _ => truthy(&left.value),
                };
                if short {
                    Ok(left)
                } else {
                    self.eval(r, frame, depth)
                }
            }
            "comparison_operator" => self.comparison(node, frame, depth),
            "conditional_expression" => {
                let mut cursor = node.walk();
                let parts: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
                let [then, condition, otherwise] = parts[..] else {
                    return Err(format!("`{}` is not evaluated", snippet(text)));
                };
                let truth = self.eval(condition, frame, depth).map_err(|why| {
                    format!(
                        "`{}` depends on a condition that cannot be decided from this file ({why})",
                        snippet(text)
                    )
                })?;
                if truthy(&truth.value) {
                    self.eval(then, frame, depth)
                } else {
                    self.eval(otherwise, frame, depth)
                }
            }
            "call" => self.call(node, frame, depth),
            "comment" => Err("a comment".into()),
            _ => Err(format!(
                "`{}` ({}) is not evaluated",
                snippet(text),
                node.kind().replace('_', " ")
            )),
        }
    }

    pub(super) fn string(&self, node: Node<'f>) -> Result<String, String> {
        if node.kind() != "string" {
            return Err(format!(
                "`{}` is not a plain string",
                snippet(self.text(node))
            ));
        }
        let prefix: String = self
            .text(node)
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect::<String>()
            .to_ascii_lowercase();
        let raw = prefix.contains('r');
        if prefix.contains('b') {
            return Err(format!("`{}` is a bytes literal", snippet(self.text(node))));
        }
        let mut out = String::new();
        let mut cursor = node.walk();
        for part in node.named_children(&mut cursor) {
            match part.kind() {
                "string_content" => self.string_content(part, raw, &mut out),
                "escape_sequence" if raw => out.push_str(self.text(part)),
                "escape_sequence" => out.push_str(&unescape(self.text(part))),
                "interpolation" => {
                    return Err(format!(
                        "f-string `{}` is not evaluated",
                        snippet(self.text(node))
                    ))
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Appends a string's content with its escape sequences (children of the content) decoded.
    fn string_content(&self, content: Node<'f>, raw: bool, out: &mut String) {
        let source = self.file.source.as_str();
        let mut at = content.start_byte();
        let mut cursor = content.walk();
        for escape in content.named_children(&mut cursor) {
            if escape.kind() != "escape_sequence" {
                continue;
            }
            out.push_str(source.get(at..escape.start_byte()).unwrap_or(""));
            let seq = self.text(escape);
            if raw {
                out.push_str(seq);
            } else {
                out.push_str(&unescape(seq));
            }
            at = escape.end_byte();
        }
        out.push_str(source.get(at..content.end_byte()).unwrap_or(""));
    }

    fn dictionary(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let mut out = Known::plain(Value::Object(Map::new()));
        let mut cursor = node.walk();
        let children: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
        for child in children {
            match child.kind() {
                "pair" => {
                    let (Some(k), Some(v)) = (
                        child.child_by_field_name("key"),
                        child.child_by_field_name("value"),
                    ) else {
                        continue;
                    };
                    let Some(key) = dict_key(&self.eval(k, frame, depth)?.value) else {
                        return Err(format!(
                            "dictionary key `{}` is not a string, number or tuple of them",
                            snippet(self.text(k))
                        ));
                    };
                    match self.eval(v, frame, depth) {
                        Ok(value) => out.set(&[key], value),
                        Err(reason) => out.forget(&[key], None, reason),
                    }
                }
                "dictionary_splat" => {
                    let inner = single_named_child(child)
                        .ok_or_else(|| format!("`{}` is incomplete", self.text(child)))?;
                    match self.eval(inner, frame, depth) {
                        Ok(Known {
                            value: Value::Object(map),
                            gaps,
                        }) => {
                            for (k, v) in map {
                                let sub: Vec<Gap> = gaps
                                    .iter()
                                    .filter(|g| g.path.first() == Some(&k))
                                    .cloned()
                                    .map(|mut g| {
                                        g.path.remove(0);
                                        g
                                    })
                                    .collect();
                                out.set(
                                    &[k],
                                    Known {
                                        value: v,
                                        gaps: sub,
                                    },
                                );
                            }
                        }
                        Ok(_) => {
                            return Err(format!(
                                "`{}` does not unpack a dictionary",
                                snippet(self.text(child))
                            ))
                        }
                        Err(reason) => out.gaps.push(Gap::whole(self.text(child), reason)),
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    fn name(&mut self, name: &str, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        if let Some(binding) = frame.and_then(|f| f.env.get(name)) {
            return match binding {
                Binding::Known(k) => Ok(k.clone()),
                Binding::Unknown(reason) => Err(format!("`{name}` is not known: {reason}")),
            };
        }
        if self.constants.contains_key(name) || self.imports.contains_key(name) {
            return self.constant_value(name, depth);
        }
        Err(format!("`{name}` is not defined in this file"))
    }

    fn attribute(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let text = self.text(node);
        let Some((root, path)) = self.attribute_chain(node) else {
            return Err(format!("`{}` is not evaluated", snippet(text)));
        };
        let local = frame.is_some_and(|f| f.env.contains_key(&root));
        if root == "torch" && !local && !self.constants.contains_key("torch") {
            // `torch.bfloat16` is written as the dtype's name, as override files spell it.
            return match path.as_slice() {
                [dtype] if TORCH_DTYPES.contains(&dtype.as_str()) => {
                    Ok(Known::plain(Value::String(dtype.clone())))
                }
                _ => Err(format!("`{}` is not a torch dtype", snippet(text))),
            };
        }
        if !local
            && !self.constants.contains_key(root.as_str())
            && self.megatron_enums.contains(&root)
        {
            // A member of one of Megatron-Core's configuration enums (`AttnBackend.fused`) is
            // written as its name, as override files and the argument dump spell it.
            return match path.as_slice() {
                [member] => Ok(Known::plain(Value::String(member.clone()))),
                _ => Err(format!("`{}` is not an enum member", snippet(text))),
            };
        }
        let base = self.name(&root, frame, depth)?;
        match get_path(&base.value, &path) {
            Some(value) => Ok(Known::plain(value.clone())),
            None => Err(format!("`{}` is not set in this file", snippet(text))),
        }
    }

    /// `value[index]` read: a dict by key (tuples too, as `dict_key` spells them), a list or
    /// string by integer index (negative from the end). Slices are not evaluated.
    fn subscript_value(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let shown = snippet(self.text(node));
        let not_evaluated = |why: &str| format!("`{shown}`: {why}");
        let object = node
            .child_by_field_name("value")
            .ok_or_else(|| not_evaluated("incomplete"))?;
        let mut cursor = node.walk();
        let indices: Vec<Node<'f>> = node
            .children_by_field_name("subscript", &mut cursor)
            .collect();
        if indices.iter().any(|i| i.kind() == "slice") || indices.is_empty() {
            return Err(not_evaluated("slices are not evaluated"));
        }
        let container = self.eval(object, frame, depth)?;
        let mut index_values = Vec::new();
        for index in indices {
            index_values.push(self.eval(index, frame, depth)?.value);
        }
        let index = match index_values.len() {
            1 => index_values.pop().unwrap_or(Value::Null),
            _ => Value::Array(index_values),
        };
        match &container.value {
            Value::Object(map) => {
                let key =
                    dict_key(&index).ok_or_else(|| not_evaluated("the key is not hashable"))?;
                if container
                    .gaps
                    .iter()
                    .any(|g| g.path.is_empty() || g.path.first() == Some(&key))
                {
                    return Err(not_evaluated("that entry is not known"));
                }
                map.get(&key)
                    .cloned()
                    .map(Known::plain)
                    .ok_or_else(|| not_evaluated(&format!("no key {key} (KeyError)")))
            }
            Value::Array(_) | Value::String(_) => {
                let Some(i) = index.as_i64() else {
                    return Err(not_evaluated("the index is not an integer"));
                };
                let items: Vec<Value> = match &container.value {
                    Value::Array(items) => items.clone(),
                    Value::String(text) => {
                        text.chars().map(|c| Value::String(c.to_string())).collect()
                    }
                    _ => Vec::new(),
                };
                let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
                let at = if i < 0 { len.saturating_add(i) } else { i };
                let position = usize::try_from(at).ok().filter(|p| *p < items.len());
                if !container.gaps.is_empty() {
                    return Err(not_evaluated("the sequence is not fully known"));
                }
                position
                    .and_then(|p| items.get(p).cloned())
                    .map(Known::plain)
                    .ok_or_else(|| not_evaluated("index out of range (IndexError)"))
            }
            _ => Err(not_evaluated("not a dict, list or string")),
        }
    }

    fn comparison(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let mut operands = Vec::new();
        let mut operators: Vec<String> = Vec::new();
        let mut pending_op = String::new();
        let mut cursor = node.walk();
        let children: Vec<Node<'f>> = node.children(&mut cursor).collect();
        for child in children {
            if child.is_named() {
                if !operands.is_empty() {
                    operators.push(std::mem::take(&mut pending_op));
                }
                operands.push(self.eval(child, frame, depth)?.value);
            } else {
                if !pending_op.is_empty() {
                    pending_op.push(' ');
                }
                pending_op.push_str(self.text(child));
            }
        }
        if operators.len().saturating_add(1) != operands.len() {
            return Err(format!("`{}` is not evaluated", snippet(self.text(node))));
        }
        for (i, op) in operators.iter().enumerate() {
            let (Some(l), Some(r)) = (operands.get(i), operands.get(i.saturating_add(1))) else {
                break;
            };
            let holds = compare(op, l, r)
                .ok_or_else(|| format!("`{}` is not evaluated", snippet(self.text(node))))?;
            if !holds {
                return Ok(Known::plain(Value::Bool(false)));
            }
        }
        Ok(Known::plain(Value::Bool(true)))
    }
}

/// The module holding Megatron-Core's configuration enums (`AttnBackend`, `AttnMaskType`,
/// `CudaGraphScope`, ...: megatron/core/transformer/enums.py, Megatron-LM d98e8a64), whose
/// members a recipe imports and writes by name.
const MEGATRON_ENUMS_MODULE: &str = "megatron.core.transformer.enums";

/// The local names bound to classes imported from Megatron-Core's enum module
/// (`from megatron.core.transformer.enums import AttnBackend`, aliases included).
pub(super) fn megatron_enum_names(imports: &HashMap<String, ImportedName>) -> HashSet<String> {
    imports
        .iter()
        .filter(|(_, i)| i.level == 0 && i.module == MEGATRON_ENUMS_MODULE)
        .map(|(local, _)| local.clone())
        .collect()
}

/// `torch` dtypes written as their names (the spelling Bridge override files use).
const TORCH_DTYPES: &[&str] = &[
    "bfloat16",
    "float16",
    "half",
    "float32",
    "float",
    "float64",
    "double",
    "float8_e4m3fn",
    "float8_e5m2",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "bool",
];
