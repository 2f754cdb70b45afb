//! Calling what a recipe file defines: its functions (parameters bound, keyword defaults
//! substituted), its module constants, and the functions and constants of modules it imports.

use super::expressions::megatron_enum_names;
use super::*;

impl<'f> Evaluator<'f> {
    pub(in crate::inputs) fn new(file: &'f RecipeFile, items: &[TopItem<'f>]) -> Evaluator<'f> {
        let mut constants = HashMap::new();
        let mut functions = HashMap::new();
        for item in items {
            match item.kind {
                RecipeKind::Constant => {
                    if let Some(right) = item.node.child_by_field_name("right") {
                        constants.insert(item.name, right);
                    }
                }
                RecipeKind::Function => {
                    functions.insert(item.name, item.node);
                }
            }
        }
        Evaluator {
            file,
            constants,
            functions,
            constant_cache: HashMap::new(),
            active: Vec::new(),
            base_recipe: None,
            hf_checkpoint: None,
            flex_backend_helper: None,
            raised: None,
            workload_base_config: false,
            modules: None,
            module_id: None,
            imports: HashMap::new(),
            megatron_enums: megatron_enum_names(&imported_names(file)),
        }
    }

    /// What the call stack records for `name` defined in this evaluator's module: a
    /// function of another module may share a recipe's name (Bridge's H100 DeepSeek-V3
    /// performance recipe calls the library recipe of the same name through an alias), and
    /// that is not recursion.
    fn call_key(&self, name: &str) -> String {
        match &self.module_id {
            Some(module) => format!("{module}:{name}"),
            None => name.to_owned(),
        }
    }

    /// The module and name an imported `name` is defined under, when its module can be read.
    pub(super) fn imported(&self, name: &str) -> Option<(Rc<Module>, String)> {
        let modules = self.modules?;
        let import = self.imports.get(name)?;
        modules.definition(self.module_id.as_deref(), import)
    }

    /// The function a call by plain name reaches: this file's, else an imported one.
    pub(super) fn target(&self, function: Node<'f>) -> Option<Target<'f>> {
        if function.kind() != "identifier" {
            return None;
        }
        let name = self.text(function);
        if let Some(&def) = self.functions.get(name) {
            return Some(Target::Local(def));
        }
        let (module, def_name) = self.imported(name)?;
        Some(Target::Imported(module, def_name))
    }

    /// Runs `f` with an evaluator of `module` that shares this one's modules and call stack,
    /// then keeps what it learned about the recipe as a whole (base recipe, checkpoint, raise).
    pub(super) fn in_module<R>(
        &mut self,
        module: &Module,
        f: impl FnOnce(&mut Evaluator<'_>) -> R,
    ) -> R {
        let items = module.file.top_level();
        let mut sub = Evaluator::new(&module.file, &items);
        sub.modules = self.modules;
        sub.module_id = Some(module.id.clone());
        sub.imports = module.imports.clone();
        sub.active = std::mem::take(&mut self.active);
        let result = f(&mut sub);
        self.active = std::mem::take(&mut sub.active);
        if self.base_recipe.is_none() {
            self.base_recipe = sub.base_recipe.take();
        }
        if self.hf_checkpoint.is_none() {
            self.hf_checkpoint = sub.hf_checkpoint.take();
        }
        self.workload_base_config |= sub.workload_base_config;
        if sub.flex_backend_helper.is_some() {
            self.flex_backend_helper = sub.flex_backend_helper.take();
        }
        if self.raised.is_none() {
            self.raised = sub.raised.take();
        }
        result
    }

    /// Calls `target` with the arguments of `call` (evaluated here); returns what it did and,
    /// for each argument, the parameter it binds and its node (for writing back).
    #[allow(clippy::type_complexity)]
    pub(super) fn invoke(
        &mut self,
        target: Target<'f>,
        call: Node<'f>,
        frame: &Frame<'f>,
        depth: usize,
    ) -> (CallResult, Vec<(Option<String>, Node<'f>)>) {
        match target {
            Target::Local(def) => {
                let params = self.positional_parameter_names(def);
                let (positional, keywords, nodes) =
                    self.call_arguments(call, frame, &params, depth);
                (self.call_function(def, positional, keywords, depth), nodes)
            }
            Target::Imported(module, name) => {
                // The parameter names are the module's; the arguments are evaluated here.
                let not_a_function = || format!("`{name}` in {} is not a function", module.id);
                let params = self.in_module(&module, |sub| {
                    sub.functions
                        .get(name.as_str())
                        .map(|&def| sub.positional_parameter_names(def))
                });
                let Some(params) = params else {
                    return (CallResult::unknown(not_a_function()), Vec::new());
                };
                let (positional, keywords, nodes) =
                    self.call_arguments(call, frame, &params, depth);
                let result =
                    self.in_module(&module, |sub| match sub.functions.get(name.as_str()) {
                        Some(&def) => {
                            sub.call_function(def, positional, keywords, depth.saturating_add(1))
                        }
                        None => CallResult::unknown(not_a_function()),
                    });
                (result, nodes)
            }
        }
    }

    pub(in crate::inputs) fn text(&self, node: Node<'_>) -> &'f str {
        node.utf8_text(self.file.source.as_bytes()).unwrap_or("")
    }

    pub(super) fn constant(&mut self, name: &str) -> Result<Binding, String> {
        self.constant_value(name, 0).map(Binding::Known)
    }

    pub(super) fn constant_value(&mut self, name: &str, depth: usize) -> Eval {
        if let Some(cached) = self.constant_cache.get(name) {
            return cached.clone();
        }
        let Some(&right) = self.constants.get(name) else {
            if let Some((module, def_name)) = self.imported(name) {
                return self.in_module(&module, |sub| {
                    if sub.constants.contains_key(def_name.as_str()) {
                        sub.constant_value(&def_name, depth.saturating_add(1))
                    } else {
                        Err(format!(
                            "`{name}` is a function of {}, not a value",
                            module.id
                        ))
                    }
                });
            }
            return Err(format!("`{name}` is not defined in this file"));
        };
        let key = self.call_key(name);
        if self.active.contains(&key) {
            return Err(format!("`{name}` refers to itself"));
        }
        self.active.push(key);
        // Module constants see only the module: evaluate without a function frame.
        let result = if right.kind() == "assignment" {
            Err(format!("`{name}` is a chained assignment"))
        } else {
            self.eval(right, None, depth.saturating_add(1))
        };
        self.active.pop();
        self.constant_cache.insert(name.to_owned(), result.clone());
        result
    }

    // ----- functions and statements -------------------------------------------------------

    pub(super) fn call_function(
        &mut self,
        def: Node<'f>,
        positional: Vec<Binding>,
        keywords: Vec<(String, Binding)>,
        depth: usize,
    ) -> CallResult {
        let name = def
            .child_by_field_name("name")
            .map(|n| self.text(n))
            .unwrap_or("<function>");
        let fail = CallResult::unknown;
        if depth > MAX_DEPTH {
            return fail(format!("`{name}` calls nest too deeply to evaluate"));
        }
        let key = self.call_key(name);
        if self.active.contains(&key) {
            return fail(format!("`{name}` calls itself"));
        }
        self.active.push(key);
        let mut frame = Frame {
            env: HashMap::new(),
            root: String::new(),
            loose: Vec::new(),
            returned: None,
            function: name,
            may_have_returned: None,
        };
        let param_names = self.bind_parameters(def, positional, keywords, &mut frame, depth);
        frame.root = def
            .child_by_field_name("body")
            .and_then(|body| self.returned_name(body))
            .or_else(|| param_names.first().cloned())
            .unwrap_or_else(|| "cfg".to_owned());
        if let Some(body) = def.child_by_field_name("body") {
            self.exec_block(body, &mut frame, None, depth.saturating_add(1));
        }
        self.active.pop();
        let result = match frame.returned.take() {
            Some(binding) => binding,
            None => frame
                .env
                .get(&frame.root)
                .cloned()
                .unwrap_or_else(|| Binding::Known(Known::plain(Value::Null))),
        };
        let params = param_names
            .iter()
            .filter_map(|p| frame.env.get(p).map(|b| (p.clone(), b.clone())))
            .collect();
        CallResult {
            result,
            loose: frame.loose,
            params,
        }
    }

    /// Binds arguments to parameters (defaults evaluated at module level, as Python does);
    /// returns the parameter names in order.
    fn bind_parameters(
        &mut self,
        def: Node<'f>,
        positional: Vec<Binding>,
        mut keywords: Vec<(String, Binding)>,
        frame: &mut Frame<'f>,
        depth: usize,
    ) -> Vec<String> {
        let mut names = Vec::new();
        let mut positional = positional.into_iter();
        let mut keyword_only = false;
        let Some(params) = def.child_by_field_name("parameters") else {
            return names;
        };
        let mut cursor = params.walk();
        for param in params.named_children(&mut cursor) {
            let (name_node, default) = match param.kind() {
                "identifier" => (Some(param), None),
                "typed_parameter" => (first_identifier(param), None),
                "default_parameter" | "typed_default_parameter" => (
                    param.child_by_field_name("name"),
                    param.child_by_field_name("value"),
                ),
                "list_splat_pattern" | "dictionary_splat_pattern" => {
                    keyword_only = true;
                    if let Some(n) = first_identifier(param) {
                        let n = self.text(n).to_owned();
                        frame.env.insert(
                            n.clone(),
                            Binding::Unknown(format!("`{n}` collects extra arguments")),
                        );
                    }
                    continue;
                }
                "keyword_separator" => {
                    keyword_only = true;
                    continue;
                }
                _ => continue,
            };
            let Some(name_node) = name_node else { continue };
            let pname = self.text(name_node).to_owned();
            let given = keywords
                .iter()
                .position(|(k, _)| *k == pname)
                .map(|i| keywords.remove(i).1)
                .or_else(|| {
                    if keyword_only {
                        None
                    } else {
                        positional.next()
                    }
                });
            let binding = match (given, default) {
                (Some(b), _) => b,
                (None, Some(d)) => match self.eval(d, None, depth.saturating_add(1)) {
                    Ok(k) => Binding::Known(k),
                    Err(reason) => {
                        Binding::Unknown(format!("the default of parameter `{pname}`: {reason}"))
                    }
                },
                (None, None) => Binding::Unknown(format!(
                    "parameter `{pname}` of `{}` has no default",
                    frame.function
                )),
            };
            frame.env.insert(pname.clone(), binding);
            names.push(pname);
        }
        for (k, _) in keywords {
            frame.loose.push(Gap::whole(
                &format!("{}({k}=...)", frame.function),
                format!("`{}` has no parameter `{k}`", frame.function),
            ));
        }
        names
    }

    /// The identifier of the function's top-level `return <name>`, if that is how it returns.
    fn returned_name(&self, body: Node<'f>) -> Option<String> {
        let mut cursor = body.walk();
        let names: Vec<String> = body
            .named_children(&mut cursor)
            .filter(|s| s.kind() == "return_statement")
            .filter_map(single_named_child)
            .filter(|e| e.kind() == "identifier")
            .map(|e| self.text(e).to_owned())
            .collect();
        names.last().cloned()
    }
}
