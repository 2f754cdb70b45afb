#!/usr/bin/env python3
"""Generate data/inputs/megatron-lm-arguments.yaml from a Megatron-LM source tree.

Reads `megatron/training/arguments.py` with the standard-library `ast` module (nothing is
imported or executed) and lists every command-line argument `parse_args()` defines:
the explicit `add_argument(...)` calls, and the arguments `ArgumentGroupFactory` builds
from dataclass fields (TransformerConfig, TrainingConfig, ...), following the rules of
`megatron/training/argument_utils.py` (bool fields become store_true/store_false with
`--no-`/`--disable-` names, `Optional[X]` is X, `list[X]` takes nargs '+', `Literal` and
Enum types give choices, `argparse_meta` field metadata overrides all of these).
The extra arguments `pretrain_gpt.py` adds when nvidia-modelopt is installed
(`megatron/post_training/arguments.py:add_modelopt_args`) are listed too, marked with
their source.

Usage:
    scripts/megatron-arguments.py SOURCE [--rev REV] [--also REV ...] [-o data/inputs/megatron-lm-arguments.yaml]

`--also REV` adds the arguments only another revision has (Megatron-LM's `dev` branch runs
ahead of `main`, and its recipes use them), each marked with `also_at`; an option string
both revisions define keeps the first revision's definition.

SOURCE is a Megatron-LM checkout or a bare git directory (read at REV, default HEAD).
"""

import argparse
import ast
import json
import os
import subprocess
import sys

ARGUMENTS_PY = "megatron/training/arguments.py"
ROOT_FUNCTION = "add_megatron_arguments"
# pretrain_gpt.py passes this as extra_args_provider when nvidia-modelopt is importable.
EXTRA_PROVIDERS = [("megatron/post_training/arguments.py", "add_modelopt_args")]


class Source:
    """Files of one Megatron-LM revision, from a checkout or a bare git directory."""

    def __init__(self, path, rev):
        self.path = path
        self.rev = rev
        self.worktree = os.path.isfile(os.path.join(path, ARGUMENTS_PY))
        self.cache = {}

    def git(self, *args):
        base = ["git", "-C", self.path] if self.worktree else ["git", "--git-dir", self.path]
        return subprocess.run(base + list(args), check=True, capture_output=True, text=True).stdout

    def commit(self):
        return self.git("rev-parse", self.rev if not self.worktree else "HEAD").strip()

    def commit_date(self):
        rev = self.rev if not self.worktree else "HEAD"
        return self.git("log", "-1", "--format=%cI", rev).strip()

    def read(self, relpath):
        if relpath in self.cache:
            return self.cache[relpath]
        text = None
        if self.worktree:
            full = os.path.join(self.path, relpath)
            if os.path.isfile(full):
                with open(full, encoding="utf-8") as f:
                    text = f.read()
        else:
            try:
                text = self.git("show", f"{self.rev}:{relpath}")
            except subprocess.CalledProcessError:
                text = None
        self.cache[relpath] = text
        return text

    def module(self, dotted):
        """(relpath, ast.Module) of a dotted module name, or None."""
        base = dotted.replace(".", "/")
        for rel in (base + ".py", base + "/__init__.py"):
            text = self.read(rel)
            if text is not None:
                return rel, ast.parse(text, rel)
        return None


def module_name(relpath):
    name = relpath[:-3].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def absolute_module(current_rel, node):
    """Dotted module an ImportFrom refers to, resolving relative imports."""
    if node.level == 0:
        return node.module
    package = module_name(current_rel).split(".")
    if not current_rel.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def find_class(src, relpath, tree, name, depth=0):
    """Locate class `name` as seen from module `relpath`: (relpath, tree, ClassDef) or None."""
    if depth > 8:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return relpath, tree, node
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    target = src.module(absolute_module(relpath, node))
                    if target is not None:
                        found = find_class(src, target[0], target[1], alias.name, depth + 1)
                        if found:
                            return found
    return None


def is_enum(src, found):
    rel, tree, cls = found
    for base in cls.bases:
        text = ast.unparse(base)
        if text.split(".")[-1] in ("Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"):
            return True
        if isinstance(base, ast.Name):
            parent = find_class(src, rel, tree, base.id)
            if parent and is_enum(src, parent):
                return True
    return False


def enum_members(cls):
    names = []
    for node in cls.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    names.append(target.id)
    return names


class NotLiteral(Exception):
    pass


def evaluate(node):
    """Value of a literal expression (constants, containers, arithmetic on numbers)."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.BinOp):
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(left, (int, float)) and isinstance(right, (int, float)):
            ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
                   ast.Mult: lambda a, b: a * b, ast.Pow: lambda a, b: a ** b,
                   ast.Div: lambda a, b: a / b}
            op = ops.get(type(node.op))
            if op is not None:
                return op(left, right)
    raise NotLiteral(ast.unparse(node))


def set_default(spec, node):
    try:
        value = evaluate(node)
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, (set, frozenset, bytes, complex)):
            raise NotLiteral(ast.unparse(node))
        spec["default"] = value
    except NotLiteral as expr:
        spec["default_expr"] = str(expr)


def type_text(node):
    if node is None:
        return None
    return ast.unparse(node)


class TypeInferenceError(Exception):
    pass


def extract_type(src, rel, tree, ann):
    """Emulates ArgumentGroupFactory._extract_type on an annotation AST."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        ann = ast.parse(ann.value, mode="eval").body
    # X | None
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        if isinstance(ann.right, ast.Constant) and ann.right.value is None:
            return extract_type(src, rel, tree, ann.left)
        raise TypeInferenceError(ast.unparse(ann))
    if isinstance(ann, ast.Subscript):
        origin = ast.unparse(ann.value).split(".")[-1]
        inner = ann.slice
        items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if origin == "Optional":
            return extract_type(src, rel, tree, items[0])
        if origin == "Union":
            if len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is None:
                return extract_type(src, rel, tree, items[0])
            raise TypeInferenceError(ast.unparse(ann))
        if origin in ("list", "List"):
            if len(items) != 1:
                raise TypeInferenceError(ast.unparse(ann))
            kwargs = extract_type(src, rel, tree, items[0])
            kwargs["nargs"] = "+"
            return kwargs
        if origin == "Literal":
            choices = [evaluate(i) for i in items]
            return {"type": type(choices[0]).__name__, "choices": choices}
        raise TypeInferenceError(ast.unparse(ann))
    if isinstance(ann, ast.Name):
        if ann.id in ("int", "float", "str", "bool"):
            return {"type": ann.id}
        found = find_class(src, rel, tree, ann.id)
        if found and is_enum(src, found):
            return {"type": f"enum {ann.id} (by member name)", "choices": enum_members(found[2])}
        if ann.id in ("Callable", "Any", "Tuple", "Dict", "dict", "tuple"):
            raise TypeInferenceError(ann.id)
        return {"type": ann.id}
    if isinstance(ann, ast.Attribute):
        return {"type": ast.unparse(ann)}
    raise TypeInferenceError(ast.unparse(ann))


def option_dest(options):
    """argparse's dest for option strings: the first long option, dashes to underscores."""
    longs = [o for o in options if o.startswith("--")]
    first = longs[0] if longs else options[0]
    return first.lstrip("-").replace("-", "_")


def dataclass_fields(src, rel, tree, cls, depth=0):
    """(name, annotation, value) of a dataclass's init fields, bases first."""
    fields = {}
    if depth < 8:
        for base in reversed(cls.bases):
            if isinstance(base, ast.Name):
                found = find_class(src, rel, tree, base.id)
                if found:
                    for f in dataclass_fields(src, *found, depth + 1):
                        fields[f[0]] = f
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann_text = ast.unparse(node.annotation)
        if ann_text.startswith(("ClassVar", "typing.ClassVar", "InitVar")):
            continue
        fields[node.target.id] = (node.target.id, node.annotation, node.value, rel, tree, cls.name)
    return list(fields.values())


def is_field_call(node):
    return (isinstance(node, ast.Call)
            and ast.unparse(node.func).split(".")[-1] == "field")


def factory_arguments(src, rel, tree, class_name, exclude, group, warnings):
    """Arguments ArgumentGroupFactory(class_name, exclude).build_group(...) adds."""
    found = find_class(src, rel, tree, class_name)
    if found is None:
        warnings.append(f"class {class_name} not found from {rel}")
        return []
    out = []
    for name, ann, value, frel, ftree, owner in dataclass_fields(src, *found):
        if name in exclude:
            continue
        spec = {"options": ["--" + name.replace("_", "-")], "dest": name}
        meta = None
        init = True
        default_node = value
        default_is_false = False
        if is_field_call(value):
            default_node = None
            for kw in value.keywords:
                if kw.arg == "default":
                    default_node = kw.value
                elif kw.arg == "default_factory":
                    factory = kw.value
                    if isinstance(factory, ast.Lambda):
                        default_node = factory.body
                    elif isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
                        default_node = ast.parse("[]" if factory.id == "list" else "{}",
                                                 mode="eval").body
                    else:
                        spec["default_expr"] = ast.unparse(factory) + "()"
                elif kw.arg == "init":
                    init = not (isinstance(kw.value, ast.Constant) and kw.value.value is False)
                elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if isinstance(k, ast.Constant) and k.value == "argparse_meta":
                            meta = v
        if not init:
            continue
        if default_node is not None:
            set_default(spec, default_node)
            default_is_false = (isinstance(default_node, ast.Constant)
                                and default_node.value is False)
        try:
            kwargs = extract_type(src, frel, ftree, ann)
            if kwargs.get("type") == "bool":
                kwargs.pop("type")
                # argument_utils.py: `"store_true" if attribute.default == False else "store_false"`
                if default_is_false:
                    kwargs["action"] = "store_true"
                else:
                    kwargs["action"] = "store_false"
                    spec["options"] = ["--no-" + name.replace("_", "-"),
                                       "--disable-" + name.replace("_", "-")]
            spec.update(kwargs)
        except TypeInferenceError as err:
            if meta is None:
                warnings.append(f"{class_name}.{name}: type {err} not inferable and no argparse_meta")
                continue
            spec["type"] = type_text(ann)
        if meta is not None and isinstance(meta, ast.Dict):
            for k, v in zip(meta.keys, meta.values):
                key = k.value if isinstance(k, ast.Constant) else None
                if key == "arg_names":
                    spec["options"] = evaluate(v)
                elif key in ("default", "nargs", "const"):
                    spec.pop("default_expr", None)
                    set_default(spec, v) if key == "default" else spec.__setitem__(key, evaluate(v))
                elif key == "choices":
                    try:
                        spec["choices"] = list(evaluate(v))
                    except NotLiteral:
                        spec["choices"] = choices_from_expression(src, frel, ftree, v)
                elif key in ("type",):
                    spec["type"] = type_text(v)
                elif key in ("action", "dest"):
                    spec[key] = evaluate(v)
        spec.setdefault("action", "store")
        spec["group"] = group
        spec["origin"] = f"{frel}:{owner}.{name}"
        out.append(spec)
    return out


def choices_from_expression(src, rel, tree, node):
    """`[x.name for x in SomeEnum]` -> the enum's member names; otherwise the expression."""
    if isinstance(node, ast.ListComp) and len(node.generators) == 1:
        it = node.generators[0].iter
        if isinstance(it, ast.Name):
            found = find_class(src, rel, tree, it.id)
            if found and is_enum(src, found):
                return enum_members(found[2])
    return {"expression": ast.unparse(node)}


def explicit_argument(call, group, origin):
    options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    spec = {"options": options}
    action = "store"
    for kw in call.keywords:
        if kw.arg in ("help", "metavar"):
            continue
        if kw.arg == "default":
            set_default(spec, kw.value)
        elif kw.arg == "type":
            spec["type"] = type_text(kw.value)
        elif kw.arg == "choices":
            try:
                spec["choices"] = list(evaluate(kw.value))
            except NotLiteral:
                spec["choices"] = {"expression": ast.unparse(kw.value)}
        elif kw.arg == "action":
            try:
                action = evaluate(kw.value)
            except NotLiteral:
                action = ast.unparse(kw.value)
        elif kw.arg is not None:
            try:
                spec[kw.arg] = evaluate(kw.value)
            except NotLiteral:
                spec[kw.arg] = ast.unparse(kw.value)
    spec.setdefault("dest", option_dest(options))
    if str(action).endswith("BooleanOptionalAction"):
        # argparse adds a `--no-X` option string for every `--X`.
        action = "boolean_optional"
        spec["options"] = options + ["--no-" + o[2:] for o in options if o.startswith("--")]
    spec["action"] = action
    if "default" not in spec and "default_expr" not in spec:
        # argparse's implicit defaults.
        spec["default"] = {"store_true": False, "store_false": True}.get(action)
    spec["group"] = group
    spec["origin"] = origin
    return spec


class FunctionWalker(ast.NodeVisitor):
    """Visits one argument-adding function in source order."""

    def __init__(self, src, rel, tree, function, warnings):
        self.src, self.rel, self.tree = src, rel, tree
        self.function = function
        self.warnings = warnings
        self.factories = {}  # variable -> (class name, exclude list)
        self.groups = {}  # variable -> group title
        self.arguments = []

    def factory_of(self, call):
        if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("ArgumentGroupFactory"):
            cls = call.args[0].id if call.args and isinstance(call.args[0], ast.Name) else None
            exclude = []
            for kw in call.keywords:
                if kw.arg == "exclude":
                    if isinstance(kw.value, ast.Name):
                        exclude = self.local_list(kw.value.id)
                    else:
                        exclude = evaluate(kw.value)
            if len(call.args) > 1:
                exclude = evaluate(call.args[1]) if not isinstance(call.args[1], ast.Name) \
                    else self.local_list(call.args[1].id)
            return cls, exclude
        return None

    def local_list(self, name):
        for node in ast.walk(self.function):
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return evaluate(node.value)
        self.warnings.append(f"exclude list {name} not found")
        return []

    @staticmethod
    def title_of(call):
        for kw in call.keywords:
            if kw.arg == "title":
                return evaluate(kw.value)
        if len(call.args) > 1:
            return evaluate(call.args[1])
        if len(call.args) == 1 and call.func.attr == "add_argument_group":
            return evaluate(call.args[0])
        return None

    def visit_Assign(self, node):
        self.generic_visit(node)
        target = node.targets[0]
        if not isinstance(target, ast.Name):
            return
        factory = self.factory_of(node.value)
        if factory:
            self.factories[target.id] = factory
        elif isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
            attr = node.value.func.attr
            if attr in ("add_argument_group", "build_group"):
                self.groups[target.id] = self.title_of(node.value)
            elif attr == "add_mutually_exclusive_group":
                base = node.value.func.value
                self.groups[target.id] = self.groups.get(base.id) if isinstance(base, ast.Name) else None

    def visit_Call(self, node):
        self.generic_visit(node)
        if not isinstance(node.func, ast.Attribute):
            return
        origin = f"{self.rel}:{self.function.name}"
        if node.func.attr == "build_group":
            owner = node.func.value
            factory = self.factories.get(owner.id) if isinstance(owner, ast.Name) else self.factory_of(owner)
            if factory is None:
                self.warnings.append(f"{origin}: build_group on unknown factory")
                return
            self.arguments += factory_arguments(self.src, self.rel, self.tree, factory[0],
                                                set(factory[1]), self.title_of(node), self.warnings)
        elif node.func.attr == "add_argument":
            owner = node.func.value
            group = self.groups.get(owner.id) if isinstance(owner, ast.Name) else None
            self.arguments.append(explicit_argument(node, group, origin))


def function_arguments(src, rel, tree, name, warnings):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            walker = FunctionWalker(src, rel, tree, node, warnings)
            walker.visit(node)
            return walker.arguments
    warnings.append(f"function {name} not found in {rel}")
    return []


def collect(src):
    warnings = []
    tree = ast.parse(src.read(ARGUMENTS_PY), ARGUMENTS_PY)
    root = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == ROOT_FUNCTION)
    arguments = []
    for stmt in root.body:
        call = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            arguments += function_arguments(src, ARGUMENTS_PY, tree, call.func.id, warnings)
    allow_abbrev = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentParser"):
            for kw in node.keywords:
                if kw.arg == "allow_abbrev":
                    allow_abbrev = evaluate(kw.value)
    for rel, name in EXTRA_PROVIDERS:
        text = src.read(rel)
        if text is None:
            warnings.append(f"{rel} absent")
            continue
        for spec in function_arguments(src, rel, ast.parse(text, rel), name, warnings):
            spec["extra_args_provider"] = f"{rel}:{name}"
            arguments.append(spec)
    seen = {}
    for spec in arguments:
        for option in spec["options"]:
            if option in seen:
                warnings.append(f"option {option} defined twice ({seen[option]}, {spec['origin']})")
            seen[option] = spec["origin"]
    return arguments, allow_abbrev, warnings


KEY_ORDER = ["options", "dest", "action", "nargs", "type", "default", "default_expr", "const",
             "choices", "required", "deprecated", "group", "origin", "extra_args_provider"]


def emit(src, arguments, allow_abbrev, also=()):
    commit, date = src.commit(), src.commit_date()
    lines = [
        "# Megatron-LM command-line arguments: every option string `parse_args()` accepts.",
        f"# Source: NVIDIA/Megatron-LM commit {commit} ({date}),",
        f"#   {ARGUMENTS_PY} (add_megatron_arguments) with the dataclass-built groups of",
        "#   megatron/training/argument_utils.py (ArgumentGroupFactory), and the extra",
        "#   arguments pretrain_gpt.py adds with nvidia-modelopt installed; arguments only the",
        "#   revisions under `also` define are added with `also_at`.",
        "# Generated by scripts/megatron-arguments.py; do not edit by hand.",
        "# `default` is given when it is a literal; otherwise `default_expr` holds the expression.",
        "source:",
        "  repository: NVIDIA/Megatron-LM",
        f"  commit: {commit}",
        f"  date: {json.dumps(date)}",
        f"  file: {ARGUMENTS_PY}",
    ]
    if also:
        lines.append("  also:")
    for rev, commit, date in also:
        lines.append(f"    - {json.dumps(f'{rev} {commit} ({date})')}")
    lines += [
        f"allow_abbrev: {json.dumps(allow_abbrev)}",
        "arguments:",
    ]
    for spec in arguments:
        ordered = {k: spec[k] for k in KEY_ORDER if k in spec}
        ordered.update({k: v for k, v in spec.items() if k not in ordered})
        lines.append("  - " + json.dumps(ordered, ensure_ascii=True))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="Megatron-LM checkout or bare git directory")
    parser.add_argument("--rev", default="HEAD", help="revision, for a git directory")
    parser.add_argument("--also", action="append", default=[],
                        help="another revision whose extra arguments are added (repeatable)")
    parser.add_argument("-o", "--output", default="data/inputs/megatron-lm-arguments.yaml")
    args = parser.parse_args()
    src = Source(args.source, args.rev)
    if src.read(ARGUMENTS_PY) is None:
        sys.exit(f"{args.source}: no {ARGUMENTS_PY} at {args.rev}")
    arguments, allow_abbrev, warnings = collect(src)
    also = []
    for rev in args.also:
        other = Source(args.source, rev)
        if other.read(ARGUMENTS_PY) is None:
            sys.exit(f"{args.source}: no {ARGUMENTS_PY} at {rev}")
        extra, _, extra_warnings = collect(other)
        warnings += [f"{rev}: {w}" for w in extra_warnings]
        known = {o for a in arguments for o in a["options"]}
        commit = other.commit()
        added = 0
        for spec in extra:
            if any(o in known for o in spec["options"]):
                continue
            spec["also_at"] = f"{rev} {commit[:12]}"
            arguments.append(spec)
            known.update(spec["options"])
            added += 1
        also.append((rev, commit, other.commit_date()))
        print(f"{rev}: {added} arguments only it defines", file=sys.stderr)
    for w in warnings:
        print("warning:", w, file=sys.stderr)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(emit(src, arguments, allow_abbrev, also))
    options = sum(len(a["options"]) for a in arguments)
    print(f"{len(arguments)} arguments, {options} option strings -> {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
