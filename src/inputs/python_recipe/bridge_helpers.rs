//! Megatron-Bridge helper calls a recipe makes on its configuration whose effect is known:
//! `_benchmark_common`, the CUDA-graph helper and `apply_flex_dispatcher_backend`, and which
//! locals a call it cannot follow may have changed.

use super::*;

impl<'f> Evaluator<'f> {
    /// Bridge's `_benchmark_common(cfg)` (perf_recipes/_common.py, v0.6.0) reduces gradients in
    /// BF16 (`cfg.ddp.grad_reduce_in_fp32 = False`) whatever the precision recipe says; that is
    /// the one thing it sets that the memory model reads.
    pub(super) fn apply_benchmark_common(&mut self, call: Node<'f>, frame: &mut Frame<'f>) {
        let Some(first) = call
            .child_by_field_name("arguments")
            .and_then(|a| a.named_child(0))
            .filter(|a| a.kind() == "identifier")
        else {
            return;
        };
        let root = self.text(first).to_owned();
        if let Some(binding) = frame.env.get_mut(&root) {
            with_known(binding, &root, |known| {
                known.set(
                    &["ddp".to_owned(), "grad_reduce_in_fp32".to_owned()],
                    Known::plain(Value::Bool(false)),
                )
            });
        }
    }

    /// The local and attribute path a helper's config argument names (`cfg.model`:
    /// `("cfg", ["model"])`), or `None` when it names no local's part.
    pub(super) fn local_path(&self, node: Node<'f>) -> Option<(String, Vec<String>)> {
        match node.kind() {
            "identifier" => Some((self.text(node).to_owned(), Vec::new())),
            "attribute" => self.attribute_chain(node),
            _ => None,
        }
    }

    /// Megatron-Bridge's CUDA-graph setters (`megatron/bridge/utils/cuda_graph.py`, Bridge
    /// 067f987d), which recipes call on `cfg.model`: `set_cuda_graph_modules(config, modules)`
    /// sets the per-layer regions, `clear_cuda_graph_modules(config)` empties them (whole
    /// layers) and `set_full_iteration_cuda_graph(config)` captures one graph per iteration.
    /// False when `callee` is none of them or its config argument is not a local's path.
    pub(super) fn apply_cuda_graph_helper(
        &mut self,
        callee: &str,
        call: Node<'f>,
        frame: &mut Frame<'f>,
        depth: usize,
    ) -> bool {
        let name = callee.rsplit('.').next().unwrap_or(callee);
        if !matches!(
            name,
            "set_cuda_graph_modules" | "clear_cuda_graph_modules" | "set_full_iteration_cuda_graph"
        ) {
            return false;
        }
        let args = call.child_by_field_name("arguments");
        let arg = |i: u32| args.and_then(|a| a.named_child(i));
        let Some((root, path)) = arg(0).and_then(|target| self.local_path(target)) else {
            return false;
        };
        let at = |field: &str| {
            let mut p = path.clone();
            p.push(field.to_owned());
            p
        };
        let modules: Eval = match name {
            "set_cuda_graph_modules" => match arg(1) {
                Some(node) => self.eval(node, Some(&*frame), depth),
                None => Err("`set_cuda_graph_modules` is called without its modules".into()),
            },
            _ => Ok(Known::plain(Value::Array(Vec::new()))),
        };
        let what = snippet(self.text(call));
        let Some(binding) = frame.env.get_mut(&root) else {
            return false;
        };
        with_known(binding, &root, |known| {
            match modules {
                Ok(list) => known.set(&at("cuda_graph_scope"), list),
                Err(reason) => known.forget(&at("cuda_graph_scope"), Some(what), reason),
            }
            known.forget_quietly(&at("cuda_graph_modules"));
            if name == "set_full_iteration_cuda_graph" {
                known.set(
                    &at("cuda_graph_impl"),
                    Known::plain(Value::String("full_iteration".into())),
                );
            }
        });
        true
    }

    /// Megatron-Bridge's `apply_flex_dispatcher_backend(model_config, backend)`
    /// (`src/megatron/bridge/training/flex_dispatcher_backend.py`, Megatron-Bridge 79308d0d),
    /// which most MoE recipes end with: for `deepep` or `hybridep` it sets
    /// `moe_token_dispatcher_type = "flex"`, the backend and `moe_shared_expert_overlap = False`;
    /// any other backend (None too) changes nothing. On a GPU the backend does not run on it
    /// falls back to `alltoall` at run time (DeepEP: Ampere, Hopper, B200, B300 only): the
    /// backend is recorded (`RecipeSettings::flex_backend_helper`) for the caller, who knows the
    /// GPU. Read as unknown, it left recipes on the `alltoall` they set first while the run
    /// used the flex dispatcher.
    pub(super) fn apply_flex_dispatcher_helper(
        &mut self,
        callee: &str,
        call: Node<'f>,
        frame: &mut Frame<'f>,
        depth: usize,
    ) -> bool {
        let name = callee.rsplit('.').next().unwrap_or(callee);
        if name != "apply_flex_dispatcher_backend" {
            return false;
        }
        let Some(args) = call.child_by_field_name("arguments") else {
            return false;
        };
        // (model_config, moe_flex_dispatcher_backend=None), by position or by name.
        let mut cursor = args.walk();
        let (mut target, mut backend_node, mut position) = (None, None, 0);
        for arg in args
            .named_children(&mut cursor)
            .filter(|n| n.kind() != "comment")
        {
            let (slot, value) = if arg.kind() == "keyword_argument" {
                match arg.child_by_field_name("name").map(|k| self.text(k)) {
                    Some("model_config") => (0, arg.child_by_field_name("value")),
                    Some("moe_flex_dispatcher_backend") => (1, arg.child_by_field_name("value")),
                    _ => return false,
                }
            } else {
                position += 1;
                (position - 1, Some(arg))
            };
            match slot {
                0 => target = value,
                1 => backend_node = value,
                _ => return false,
            }
        }
        let Some((root, path)) = target.and_then(|t| self.local_path(t)) else {
            return false;
        };
        let backend: Eval = match backend_node {
            Some(node) => self.eval(node, Some(&*frame), depth),
            None => Ok(Known::plain(Value::Null)),
        };
        let at = |field: &str| {
            let mut p = path.clone();
            p.push(field.to_owned());
            p
        };
        let what = snippet(self.text(call));
        let chosen = backend
            .as_ref()
            .map(|k| k.value.as_str().map(str::to_owned));
        let Some(binding) = frame.env.get_mut(&root) else {
            return false;
        };
        if let Ok(Some(b)) = &chosen {
            self.flex_backend_helper = match b.as_str() {
                "deepep" => Some(FlexBackend::Deepep),
                "hybridep" => Some(FlexBackend::Hybridep),
                _ => self.flex_backend_helper,
            };
        }
        with_known(binding, &root, |known| match chosen {
            Ok(Some(b)) if b == "deepep" || b == "hybridep" => {
                known.set(
                    &at("moe_token_dispatcher_type"),
                    Known::plain(Value::String("flex".into())),
                );
                known.set(
                    &at("moe_flex_dispatcher_backend"),
                    Known::plain(Value::String(b)),
                );
                known.set(
                    &at("moe_shared_expert_overlap"),
                    Known::plain(Value::Bool(false)),
                );
            }
            Ok(_) => {}
            Err(reason) => {
                for field in ["moe_token_dispatcher_type", "moe_flex_dispatcher_backend"] {
                    known.forget(&at(field), Some(what.clone()), reason.clone());
                }
            }
        });
        true
    }

    pub(super) fn record_on_locals(
        &mut self,
        touched: &[(String, Vec<String>)],
        call: Node<'f>,
        frame: &mut Frame<'f>,
        reason: String,
    ) {
        let what = snippet(self.text(call));
        for (root, path) in touched {
            if let Some(binding) = frame.env.get_mut(root) {
                with_known(binding, root, |known| {
                    known.gaps.push(Gap {
                        path: path.clone(),
                        what: Some(what.clone()),
                        reason: reason.clone(),
                    })
                });
            }
        }
    }

    /// Locals (and attribute paths into them) a call passes or calls a method on.
    pub(super) fn locals_touched(
        &self,
        call: Node<'f>,
        frame: &Frame<'f>,
    ) -> Vec<(String, Vec<String>)> {
        let mut touched: Vec<(String, Vec<String>)> = Vec::new();
        let consider = |node: Node<'f>, touched: &mut Vec<(String, Vec<String>)>| {
            let chain = match node.kind() {
                "identifier" => Some((self.text(node).to_owned(), Vec::new())),
                "attribute" => self.attribute_chain(node),
                _ => None,
            };
            if let Some((root, path)) = chain {
                let is_object = matches!(frame.env.get(&root), Some(Binding::Known(k)) if k.value.is_object())
                    || matches!(frame.env.get(&root), Some(Binding::Unknown(_)));
                if is_object && !touched.iter().any(|(r, p)| *r == root && *p == path) {
                    touched.push((root, path));
                }
            }
        };
        if let Some(function) = call.child_by_field_name("function") {
            if function.kind() == "attribute" {
                if let Some(object) = function.child_by_field_name("object") {
                    consider(object, &mut touched);
                }
            }
        }
        if let Some(args) = call.child_by_field_name("arguments") {
            let mut cursor = args.walk();
            for arg in args.named_children(&mut cursor) {
                let node = if arg.kind() == "keyword_argument" {
                    arg.child_by_field_name("value")
                } else {
                    Some(arg)
                };
                if let Some(node) = node {
                    consider(node, &mut touched);
                }
            }
        }
        touched
    }
}
