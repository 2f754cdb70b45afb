//! Statements of a function body, run in order: assignments to locals and to configuration
//! paths, `if` and `try` blocks, augmented assignments and call statements; what cannot be
//! decided is skipped and recorded with its reason.

use super::*;

impl<'f> Evaluator<'f> {
    /// `try:` runs its body; when a statement of it certainly raises, what that statement did
    /// is undone (the statements before it stay done, as in Python) and the only `except`
    /// clause runs instead (several clauses: which one catches is not decided, so the block is
    /// recorded as not evaluated). `else` runs after a body that does not raise, `finally`
    /// always.
    fn exec_try(&mut self, statement: Node<'f>, frame: &mut Frame<'f>, depth: usize) -> Flow {
        let depth = depth.saturating_add(1);
        let mut cursor = statement.walk();
        let clauses: Vec<Node<'f>> = statement.named_children(&mut cursor).collect();
        let clause_body = |clause: Node<'f>| {
            clause.child_by_field_name("body").or_else(|| {
                let mut c = clause.walk();
                let last = clause
                    .named_children(&mut c)
                    .filter(|n| n.kind() == "block")
                    .last();
                last
            })
        };
        let handlers: Vec<Node<'f>> = clauses
            .iter()
            .copied()
            .filter(|c| matches!(c.kind(), "except_clause" | "except_group_clause"))
            .collect();
        let of_kind = |kind: &str| clauses.iter().copied().find(|c| c.kind() == kind);
        let Some(body) = statement.child_by_field_name("body") else {
            return Flow::Next;
        };
        let outer_raise = self.raised.take();
        let mut flow = Flow::Next;
        let mut body_cursor = body.walk();
        let statements: Vec<Node<'f>> = body.named_children(&mut body_cursor).collect();
        for statement in statements {
            let before = frame.clone();
            flow = self.exec_statement(statement, frame, None, depth);
            if self.raised.is_some() {
                *frame = before;
                break;
            }
            if let Flow::Return = flow {
                break;
            }
        }
        let raised = std::mem::replace(&mut self.raised, outer_raise);
        match raised {
            None => {
                if let (Flow::Next, Some(body)) =
                    (&flow, of_kind("else_clause").and_then(clause_body))
                {
                    flow = self.exec_block(body, frame, None, depth);
                }
            }
            Some(statement_raised) => {
                flow = Flow::Next;
                match handlers.as_slice() {
                    [only] => {
                        if let Some(body) = clause_body(*only) {
                            flow = self.exec_block(body, frame, None, depth);
                        }
                    }
                    _ => {
                        let skip = Skip {
                            reason: format!(
                                "the `try` body raises (`{statement_raised}`) and which of its \
                                 `except` clauses catches it is not decided"
                            ),
                            may_run: true,
                        };
                        self.skip_children(statement, frame, &skip, depth);
                    }
                }
            }
        }
        if let Some(body) = of_kind("finally_clause").and_then(clause_body) {
            if let Flow::Return = self.exec_block(body, frame, None, depth) {
                return Flow::Return;
            }
        }
        flow
    }

    pub(super) fn exec_block(
        &mut self,
        block: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) -> Flow {
        if depth > MAX_DEPTH {
            frame.loose.push(Gap::whole(
                self.text(block),
                "statements nest too deeply to evaluate".into(),
            ));
            return Flow::Next;
        }
        let mut cursor = block.walk();
        let statements: Vec<Node<'f>> = block.named_children(&mut cursor).collect();
        for statement in statements {
            if let Flow::Return = self.exec_statement(statement, frame, skip, depth) {
                return Flow::Return;
            }
        }
        Flow::Next
    }

    fn exec_statement(
        &mut self,
        statement: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) -> Flow {
        let depth = depth.saturating_add(1);
        match statement.kind() {
            "expression_statement" => {
                let mut cursor = statement.walk();
                let parts: Vec<Node<'f>> = statement.named_children(&mut cursor).collect();
                for part in parts {
                    match part.kind() {
                        "assignment" => self.exec_assignment(part, frame, skip, depth),
                        "augmented_assignment" => self.exec_augmented(part, frame, skip),
                        "call" => self.exec_call_statement(part, frame, skip, depth),
                        _ => {}
                    }
                }
                Flow::Next
            }
            "if_statement" => self.exec_if(statement, frame, skip, depth),
            "return_statement" => {
                if let Some(skip) = skip {
                    if skip.may_run {
                        frame
                            .may_have_returned
                            .get_or_insert_with(|| skip.reason.clone());
                    }
                    return Flow::Next;
                }
                // A bare `return` ends the function as falling off its end does (its result is
                // then the object it built, see `call_function`); `return <expr>` gives that
                // value, None included (`layout_map[(1, 1)]` holding None is a None layout).
                frame.returned = single_named_child(statement).map(|expr| {
                    match self.eval(expr, Some(&*frame), depth) {
                        Ok(k) => Binding::Known(k),
                        Err(reason) => Binding::Unknown(reason),
                    }
                });
                Flow::Return
            }
            "raise_statement" => {
                if skip.is_some() {
                    return Flow::Next;
                }
                // A raise after a `return` that may have run (in a branch not decided) is not
                // certain: the function's value is then not known, but it is not refused.
                if let Some(why) = frame.may_have_returned.clone() {
                    let raised = snippet(self.text(statement));
                    frame.returned = Some(Binding::Unknown(format!(
                        "it raises (`{raised}`) unless it returned earlier, in a block not \
                         evaluated: {why}"
                    )));
                    return Flow::Return;
                }
                // A raise that certainly runs ends the function without a configuration.
                let raised = snippet(self.text(statement));
                frame.returned = Some(Binding::Unknown(format!("it raises: `{raised}`")));
                self.raised.get_or_insert(raised);
                Flow::Return
            }
            "with_statement" => match statement.child_by_field_name("body") {
                Some(body) => self.exec_block(body, frame, skip, depth),
                None => Flow::Next,
            },
            "try_statement" if skip.is_none() => self.exec_try(statement, frame, depth),
            "for_statement" | "while_statement" | "try_statement" | "match_statement" => {
                let inner = match skip {
                    Some(outer) => outer.clone(),
                    None => Skip {
                        reason: format!(
                            "set inside a `{}` block, which is not evaluated",
                            statement.kind().trim_end_matches("_statement")
                        ),
                        may_run: true,
                    },
                };
                self.skip_children(statement, frame, &inner, depth);
                Flow::Next
            }
            "delete_statement" => {
                frame.loose.push(Gap::whole(
                    self.text(statement),
                    "`del` is not evaluated".into(),
                ));
                Flow::Next
            }
            "ERROR" => {
                frame.loose.push(Gap::whole(
                    self.text(statement),
                    "this text does not parse as Python".into(),
                ));
                Flow::Next
            }
            _ => Flow::Next,
        }
    }

    /// Records every assignment and call inside `node`'s blocks as not applied.
    fn skip_children(&mut self, node: Node<'f>, frame: &mut Frame<'f>, skip: &Skip, depth: usize) {
        let mut cursor = node.walk();
        let children: Vec<Node<'f>> = node.named_children(&mut cursor).collect();
        for child in children {
            match child.kind() {
                "block" => {
                    self.exec_block(child, frame, Some(skip), depth.saturating_add(1));
                }
                "else_clause"
                | "except_clause"
                | "except_group_clause"
                | "finally_clause"
                | "case_clause" => {
                    self.skip_children(child, frame, skip, depth.saturating_add(1));
                }
                _ => {}
            }
        }
    }

    fn exec_if(
        &mut self,
        statement: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) -> Flow {
        // Branches in order: (condition, or None for `else`; block).
        let mut branches: Vec<(Option<Node<'f>>, Node<'f>)> = Vec::new();
        if let Some(body) = statement.child_by_field_name("consequence") {
            branches.push((statement.child_by_field_name("condition"), body));
        }
        let mut cursor = statement.walk();
        let clauses: Vec<Node<'f>> = statement
            .children_by_field_name("alternative", &mut cursor)
            .collect();
        for clause in clauses {
            match clause.kind() {
                "elif_clause" => {
                    if let Some(body) = clause.child_by_field_name("consequence") {
                        branches.push((clause.child_by_field_name("condition"), body));
                    }
                }
                "else_clause" => {
                    if let Some(body) = clause.child_by_field_name("body") {
                        branches.push((None, body));
                    }
                }
                _ => {}
            }
        }
        // Once a branch is taken the rest certainly do not run; once a condition cannot be
        // decided, it and every later branch may or may not run.
        let mut rest: Option<Skip> = skip.cloned();
        for (condition, body) in branches {
            if let Some(rest) = &rest {
                let rest = rest.clone();
                self.exec_block(body, frame, Some(&rest), depth);
                continue;
            }
            let truth = match condition {
                None => Ok(true),
                Some(c) => self.eval(c, Some(&*frame), depth).map(|k| truthy(&k.value)),
            };
            let cond_text = condition.map(|c| snippet(self.text(c))).unwrap_or_default();
            match truth {
                Ok(true) => {
                    let taken = self.exec_block(body, frame, None, depth);
                    if let Flow::Return = taken {
                        return Flow::Return;
                    }
                    rest = Some(Skip {
                        reason: "not applied: an earlier branch of this `if` is taken with this recipe's values".into(),
                        may_run: false,
                    });
                }
                Ok(false) => {
                    let not_taken = Skip {
                        reason: format!(
                            "not applied: `if {cond_text}` is false with this recipe's values"
                        ),
                        may_run: false,
                    };
                    self.exec_block(body, frame, Some(&not_taken), depth);
                }
                Err(why) => {
                    let undecided = Skip {
                        reason: format!(
                            "set only when `{cond_text}` holds, which cannot be decided from this file ({why})"
                        ),
                        may_run: true,
                    };
                    self.exec_block(body, frame, Some(&undecided), depth);
                    rest = Some(undecided);
                }
            }
        }
        Flow::Next
    }

    fn exec_assignment(
        &mut self,
        assignment: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) {
        // `a = b = value`: collect every target, then evaluate the value once.
        let mut targets = Vec::new();
        let mut node = assignment;
        let value_node = loop {
            if let Some(left) = node.child_by_field_name("left") {
                targets.push(left);
            }
            match node.child_by_field_name("right") {
                Some(right) if right.kind() == "assignment" => node = right,
                other => break other,
            }
        };
        let Some(value_node) = value_node else {
            return; // an annotation without a value (`x: int`)
        };
        if let Some(skip) = skip {
            for target in targets {
                self.assign_skipped(target, skip, frame);
            }
            return;
        }
        let value = self.eval(value_node, Some(&*frame), depth);
        for target in targets {
            self.assign(target, value.clone(), value_node, frame);
        }
    }

    /// An assignment on a path that is not (or may not be) run.
    fn assign_skipped(&mut self, target: Node<'f>, skip: &Skip, frame: &mut Frame<'f>) {
        let reason = skip.reason.clone();
        match target.kind() {
            "identifier" => {
                let name = self.text(target).to_owned();
                if !skip.may_run {
                    return; // a local on a branch not taken keeps its value
                }
                match frame.env.get_mut(&name) {
                    Some(Binding::Known(k)) => k.gaps.push(Gap::whole(&name, reason)),
                    _ => {
                        frame.env.insert(name, Binding::Unknown(reason));
                    }
                }
            }
            "attribute" => match self.attribute_chain(target) {
                Some((root, path)) if frame.env.contains_key(&root) => {
                    if let Some(binding) = frame.env.get_mut(&root) {
                        with_known(binding, &root, |known| {
                            if skip.may_run {
                                known.forget(&path, None, reason);
                            } else {
                                known.gaps.push(Gap::at(path, reason));
                            }
                        });
                    }
                }
                _ => frame.loose.push(Gap::whole(self.text(target), reason)),
            },
            "pattern_list" | "tuple_pattern" | "list_pattern" => {
                let mut cursor = target.walk();
                let parts: Vec<Node<'f>> = target.named_children(&mut cursor).collect();
                for part in parts {
                    self.assign_skipped(part, skip, frame);
                }
            }
            _ => frame.loose.push(Gap::whole(self.text(target), reason)),
        }
    }

    fn assign(
        &mut self,
        target: Node<'f>,
        value: Eval,
        value_node: Node<'f>,
        frame: &mut Frame<'f>,
    ) {
        match target.kind() {
            "identifier" => {
                let name = self.text(target).to_owned();
                let binding = match value {
                    Ok(k) => Binding::Known(k),
                    Err(reason) => Binding::Unknown(reason),
                };
                frame.env.insert(name, binding);
            }
            "attribute" => {
                let Some((root, path)) = self.attribute_chain(target) else {
                    frame.loose.push(Gap::whole(
                        self.text(target),
                        "assignment to an attribute of an expression is not evaluated".into(),
                    ));
                    return;
                };
                let Some(binding) = frame.env.get_mut(&root) else {
                    frame.loose.push(Gap::whole(
                        self.text(target),
                        format!("`{root}` is not a local of `{}`", frame.function),
                    ));
                    return;
                };
                // The reason quotes the part of the value that could not be evaluated.
                with_known(binding, &root, |known| match value {
                    Ok(v) => known.set(&path, v),
                    Err(reason) => known.forget(&path, None, reason),
                });
            }
            "pattern_list" | "tuple_pattern" | "list_pattern" => {
                let mut cursor = target.walk();
                let parts: Vec<Node<'f>> = target.named_children(&mut cursor).collect();
                let starred = parts.iter().any(|p| p.kind() == "list_splat_pattern");
                // `a, b = f()` where `f` returns a known pair: each name takes its item.
                let items = match value {
                    Ok(Known {
                        value: Value::Array(items),
                        gaps,
                    }) if items.len() == parts.len() && !starred => Ok((items, gaps)),
                    Ok(_) => Err(format!(
                        "tuple assignment from `{}` is not evaluated (not a sequence of {} known items)",
                        snippet(self.text(value_node)),
                        parts.len()
                    )),
                    Err(reason) => Err(format!(
                        "tuple assignment from `{}`: {reason}",
                        snippet(self.text(value_node))
                    )),
                };
                match items {
                    Ok((items, gaps)) => {
                        for (index, (part, item)) in parts.into_iter().zip(items).enumerate() {
                            let key = index.to_string();
                            let own = gaps
                                .iter()
                                .filter(|g| g.path.first() == Some(&key))
                                .map(|g| {
                                    let mut g = g.clone();
                                    g.path.remove(0);
                                    g
                                })
                                .collect();
                            let known = Known {
                                value: item,
                                gaps: own,
                            };
                            self.assign(part, Ok(known), value_node, frame);
                        }
                    }
                    Err(reason) => {
                        for part in parts {
                            self.assign(part, Err(reason.clone()), value_node, frame);
                        }
                    }
                }
            }
            _ => {
                let label = snippet(self.text(target));
                let reason = format!("assignment to `{label}` is not evaluated");
                match self.subscript_root(target) {
                    Some((root, path)) if frame.env.contains_key(&root) => {
                        if let Some(binding) = frame.env.get_mut(&root) {
                            with_known(binding, &root, |known| {
                                known.forget(&path, Some(label), reason)
                            });
                        }
                    }
                    _ => frame.loose.push(Gap::whole(&label, reason)),
                }
            }
        }
    }

    fn exec_augmented(&mut self, node: Node<'f>, frame: &mut Frame<'f>, skip: Option<&Skip>) {
        let Some(target) = node.child_by_field_name("left") else {
            return;
        };
        let reason = match skip {
            Some(skip) => skip.reason.clone(),
            None => format!(
                "augmented assignment `{}` is not evaluated",
                snippet(self.text(node))
            ),
        };
        if skip.is_some_and(|s| !s.may_run) {
            frame.loose.push(Gap::whole(self.text(node), reason));
            return;
        }
        match target.kind() {
            "identifier" => {
                let name = self.text(target).to_owned();
                frame.env.insert(name, Binding::Unknown(reason));
            }
            "attribute" => match self.attribute_chain(target) {
                Some((root, path)) if frame.env.contains_key(&root) => {
                    if let Some(binding) = frame.env.get_mut(&root) {
                        with_known(binding, &root, |known| known.forget(&path, None, reason));
                    }
                }
                _ => frame.loose.push(Gap::whole(self.text(node), reason)),
            },
            _ => frame.loose.push(Gap::whole(self.text(node), reason)),
        }
    }

    /// A call used as a statement: a same-file helper is evaluated and what it does to its
    /// arguments written back; any other call that touches a local is recorded.
    fn exec_call_statement(
        &mut self,
        call: Node<'f>,
        frame: &mut Frame<'f>,
        skip: Option<&Skip>,
        depth: usize,
    ) {
        let Some(function) = call.child_by_field_name("function") else {
            return;
        };
        let touched = self.locals_touched(call, frame);
        if touched.is_empty() {
            return; // logging, assertions on constants...: no setting can change
        }
        let callee = self.text(function);
        if let Some(skip) = skip {
            self.record_on_locals(&touched, call, frame, skip.reason.clone());
            return;
        }
        let local = if function.kind() == "identifier" {
            self.functions.get(callee).copied()
        } else {
            None
        };
        if local.is_none()
            && (self.apply_cuda_graph_helper(callee, call, frame, depth)
                || self.apply_flex_dispatcher_helper(callee, call, frame, depth))
        {
            return;
        }
        let Some(target) = self.target(function) else {
            let reason = if function.kind() == "attribute" {
                format!("`{callee}(...)` is a method call; what it changes is not known")
            } else if callee == BENCHMARK_COMMON {
                format!(
                    "of what `{callee}` sets (defined outside this file) only \
                     ddp.grad_reduce_in_fp32 = False is read; the rest is not known here"
                )
            } else {
                format!("`{callee}` is defined outside this file; the settings it changes are not known")
            };
            self.record_on_locals(&touched, call, frame, reason);
            if callee == BENCHMARK_COMMON {
                self.apply_benchmark_common(call, frame);
            }
            return;
        };
        let (result, arg_nodes) = self.invoke(target, call, frame, depth);
        frame.loose.extend(result.loose.into_iter().map(|mut g| {
            g.reason = format!("in `{callee}`: {}", g.reason);
            g
        }));
        // Write back what the helper did to each argument that names a local (or a part of one).
        for (param, arg) in arg_nodes {
            let Some(param) = param else { continue };
            let Some(after) = result.params.get(&param).cloned() else {
                continue;
            };
            let Some((root, path)) = self.local_path(arg) else {
                continue;
            };
            let what = snippet(self.text(call));
            let Some(binding) = frame.env.get_mut(&root) else {
                continue;
            };
            match after {
                Binding::Known(k) if path.is_empty() => *binding = Binding::Known(k),
                Binding::Known(k) => with_known(binding, &root, |known| known.set(&path, k)),
                Binding::Unknown(reason) => with_known(binding, &root, |known| {
                    known.forget(&path, Some(what), format!("in `{callee}`: {reason}"))
                }),
            }
        }
    }
}
