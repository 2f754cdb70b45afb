//! Call expressions: same-file and imported functions, configuration constructors with keyword
//! arguments, `replace(...)`, and the built-ins a recipe uses.

use super::*;

impl<'f> Evaluator<'f> {
    /// The value a call of `target` returns, its loose gaps kept with it.
    fn call_value(
        &mut self,
        target: Target<'f>,
        callee: &str,
        node: Node<'f>,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Eval {
        let module = Frame {
            env: HashMap::new(),
            root: String::new(),
            loose: Vec::new(),
            returned: None,
            function: "",
            may_have_returned: None,
        };
        let (result, _) = self.invoke(target, node, frame.unwrap_or(&module), depth);
        match result.result {
            Binding::Known(mut k) => {
                k.gaps.extend(result.loose.into_iter().map(|mut g| {
                    g.reason = format!("in `{callee}`: {}", g.reason);
                    g
                }));
                Ok(k)
            }
            Binding::Unknown(reason) => {
                Err(format!("`{callee}` returns a value not known: {reason}"))
            }
        }
    }

    pub(super) fn call(&mut self, node: Node<'f>, frame: Option<&Frame<'f>>, depth: usize) -> Eval {
        let text = self.text(node);
        let function = node
            .child_by_field_name("function")
            .ok_or_else(|| format!("`{}` is incomplete", snippet(text)))?;
        let callee = self.text(function);
        let has_args = node
            .child_by_field_name("arguments")
            .is_some_and(|a| a.named_child_count() > 0);
        if (callee == "replace" && !self.functions.contains_key("replace"))
            || callee == "dataclasses.replace"
        {
            return self.replace(node, frame, depth);
        }
        if let Some(&def) = self
            .functions
            .get(callee)
            .filter(|_| function.kind() == "identifier")
        {
            return self.call_value(Target::Local(def), callee, node, frame, depth);
        }
        let last = callee.rsplit('.').next().unwrap_or(callee);
        // Bridge's performance helper `_with_global_batch_size(cfg, n)` (perf_recipes/<family>/
        // common.py, Megatron-Bridge 067f987df) sets `cfg.train.global_batch_size = n` and
        // returns `cfg`.
        // (A same-file function of that name was evaluated above; an imported one is not.)
        if last == "_with_global_batch_size" {
            let args = node.child_by_field_name("arguments");
            let arg = |i: u32| args.and_then(|a| a.named_child(i));
            if let (Some(config), Some(size), None) = (arg(0), arg(1), arg(2)) {
                if config.kind() != "keyword_argument" && size.kind() != "keyword_argument" {
                    let mut known = self.eval(config, frame, depth)?;
                    let path = ["train".to_owned(), "global_batch_size".to_owned()];
                    match self.eval(size, frame, depth) {
                        Ok(n) => known.set(&path, n),
                        Err(reason) => known.forget(&path, Some(snippet(text)), reason),
                    }
                    return Ok(known);
                }
            }
        }
        // Bridge registers its mixed-precision recipes by function name (`@register` in
        // src/megatron/bridge/training/mixed_precision.py, Megatron-Bridge 067f987df), and an
        // override file names them the same way: `bf16_mixed()` is `mixed_precision: bf16_mixed`.
        if last.ends_with("_mixed") && !has_args {
            return Ok(Known::plain(Value::String(last.to_owned())));
        }
        // Bridge's performance helpers name the precision recipe by its compute dtype:
        // `_perf_precision("fp8_mx")` (perf_recipes/_common.py) and its twin
        // `get_precision_config("fp8_mx")` (scripts/performance/utils/precision.py), v0.6.0.
        if matches!(last, "_perf_precision" | "get_precision_config") {
            if let Some(dtype) = self.single_string_argument(node) {
                let mut known = Known::plain(Value::String(dtype.clone()));
                known.gaps.push(Gap::whole(
                    snippet(text).as_str(),
                    format!(
                        "only its compute dtype is read (the `{dtype}` precision recipe); the \
                         other fields `{last}` sets, outside this file, are not known here"
                    ),
                ));
                return Ok(known);
            }
        }
        if last.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
            // A class: its fields are not evaluated, even where its module can be read.
            return self.constructor(node, last, frame, depth);
        }
        // The special forms above win over the helpers' own definitions; any other imported
        // function is evaluated where it is defined.
        if let Some(target @ Target::Imported(..)) = self.target(function) {
            if bridge_recipe_name::base_recipe_model(callee).is_some() {
                self.base_recipe.get_or_insert_with(|| callee.to_owned());
            }
            return self.call_value(target, callee, node, frame, depth);
        }
        if function.kind() == "identifier" && !self.imports.contains_key(callee) {
            if let Some(value) = self.builtin(callee, node, frame, depth) {
                return value;
            }
        }
        if bridge_recipe_name::base_recipe_model(callee).is_some() {
            self.base_recipe.get_or_insert_with(|| callee.to_owned());
        }
        if self.hf_checkpoint.is_none() {
            self.hf_checkpoint = self.hf_repository_in(node);
        }
        Err(format!(
            "`{}` calls `{callee}`, which is defined outside this file",
            snippet(text)
        ))
    }

    /// The repository of an `AutoBridge.from_hf_pretrained("<org>/<name>")` call inside `node`
    /// (Bridge recipes build `cfg.model` from it and chain `.to_megatron_provider(...)`).
    pub(super) fn hf_repository_in(&self, node: Node<'f>) -> Option<String> {
        let mut stack = vec![node];
        let mut visited = 0usize;
        while let Some(n) = stack.pop() {
            visited += 1;
            if visited > MAX_CHECKPOINT_SCAN_NODES {
                return None;
            }
            if n.kind() == "call" {
                let function = n.child_by_field_name("function").map(|f| self.text(f));
                let loads_checkpoint = function.is_some_and(|f| {
                    f.ends_with("AutoBridge.from_hf_pretrained")
                        || f.ends_with("AutoConfig.from_pretrained")
                });
                if loads_checkpoint {
                    if let Some(repo) = self.checkpoint_argument(n) {
                        return Some(repo);
                    }
                }
            }
            let mut cursor = n.walk();
            stack.extend(n.named_children(&mut cursor));
        }
        None
    }

    /// A checkpoint call's first argument: a string, or a module constant holding one.
    fn checkpoint_argument(&self, call: Node<'f>) -> Option<String> {
        let first = call.child_by_field_name("arguments")?.named_child(0)?;
        let literal = match first.kind() {
            "identifier" => *self.constants.get(self.text(first))?,
            _ => first,
        };
        self.string(literal).ok().filter(|repo| repo.contains('/'))
    }

    /// The one plain-string argument of a call (`f("fp8_mx")`), if that is all it has.
    fn single_string_argument(&self, call: Node<'f>) -> Option<String> {
        let args = call.child_by_field_name("arguments")?;
        if args.named_child_count() != 1 {
            return None;
        }
        self.string(args.named_child(0)?).ok()
    }

    /// `SomeConfig(field=value, ...)`: the fields it names; the class's own defaults for the
    /// others are not in the file, which the gaps say.
    fn constructor(
        &mut self,
        node: Node<'f>,
        class: &str,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Eval {
        self.workload_base_config |= class == "WorkloadBaseConfig";
        let mut out = Known::plain(Value::Object(Map::new()));
        out.gaps.push(Gap::whole(
            &format!("{class}(...)"),
            format!("fields not named here take `{class}`'s defaults, which are defined outside this file"),
        ));
        self.keyword_fields(node, &mut out, frame, depth);
        Ok(out)
    }

    /// `replace(base, field=value, ...)`: the base's settings, then the fields named.
    pub(super) fn replace(
        &mut self,
        node: Node<'f>,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) -> Eval {
        let args = node
            .child_by_field_name("arguments")
            .ok_or_else(|| format!("`{}` is incomplete", snippet(self.text(node))))?;
        let mut cursor = args.walk();
        let base = args
            .named_children(&mut cursor)
            .find(|a| a.kind() != "keyword_argument" && a.kind() != "comment");
        let mut out = match base {
            None => return Err(format!("`{}` names no base", snippet(self.text(node)))),
            Some(base) => match self.eval(base, frame, depth) {
                Ok(k) if k.value.is_object() => k,
                Ok(_) => {
                    return Err(format!(
                        "the base of `{}` is not a configuration",
                        snippet(self.text(node))
                    ))
                }
                Err(reason) => Known {
                    value: Value::Object(Map::new()),
                    gaps: vec![Gap::whole(self.text(base), reason)],
                },
            },
        };
        self.keyword_fields(node, &mut out, frame, depth);
        Ok(out)
    }

    fn keyword_fields(
        &mut self,
        node: Node<'f>,
        out: &mut Known,
        frame: Option<&Frame<'f>>,
        depth: usize,
    ) {
        let Some(args) = node.child_by_field_name("arguments") else {
            return;
        };
        let mut cursor = args.walk();
        let list: Vec<Node<'f>> = args.named_children(&mut cursor).collect();
        for (index, arg) in list.into_iter().enumerate() {
            match arg.kind() {
                "keyword_argument" => {
                    let (Some(name), Some(value)) = (
                        arg.child_by_field_name("name"),
                        arg.child_by_field_name("value"),
                    ) else {
                        continue;
                    };
                    let key = vec![self.text(name).to_owned()];
                    match self.eval(value, frame, depth) {
                        Ok(v) => out.set(&key, v),
                        Err(reason) => out.forget(&key, None, reason),
                    }
                }
                "comment" => {}
                // The first positional argument of `replace` is its base, handled by the caller.
                _ if index == 0 && self.is_replace(node) => {}
                _ => out.gaps.push(Gap::whole(
                    self.text(arg),
                    "positional or unpacked arguments are not evaluated".into(),
                )),
            }
        }
    }

    pub(in crate::inputs) fn is_replace(&self, call: Node<'f>) -> bool {
        call.child_by_field_name("function")
            .map(|f| matches!(self.text(f), "replace" | "dataclasses.replace"))
            .unwrap_or(false)
    }
}
