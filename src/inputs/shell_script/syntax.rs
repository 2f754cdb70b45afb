//! What a statement is: `[ … ]` tests, assignments, glob patterns, and where `if`, loop,
//! `case` and function blocks end.

use crate::inputs::launch_script::is_identifier_path;

/// The operands of one `[ … ]` / `[[ … ]]` / `test`, expanded. Inside `[[ … ]]` (`patterns`)
/// the right side of `==` / `!=` is a glob pattern (`[[ " $MODELS " == *" clip "* ]]`).
pub(super) fn bracket_test(operands: &[String], patterns: bool) -> Option<bool> {
    // Each `||`, `&&` and `!` below recurses once; longer tests are left unknown.
    if operands.len() > 64 {
        return None;
    }
    // `[[ a && b ]]`, `[[ a || b ]]` inside one bracket.
    if let Some(at) = operands.iter().position(|w| w == "||") {
        return or3(
            bracket_test(&operands[..at], patterns),
            bracket_test(&operands[at + 1..], patterns),
        );
    }
    if let Some(at) = operands.iter().position(|w| w == "&&" || w == "-a") {
        return and3(
            bracket_test(&operands[..at], patterns),
            bracket_test(&operands[at + 1..], patterns),
        );
    }
    if let Some(rest) = operands
        .first()
        .filter(|w| *w == "!")
        .map(|_| &operands[1..])
    {
        return bracket_test(rest, patterns).map(|v| !v);
    }
    let unresolved = |w: &String| w.contains('$');
    match operands {
        [op, value] if op == "-z" || op == "-n" => {
            if unresolved(value) {
                return None;
            }
            Some((op == "-z") == value.is_empty())
        }
        [op, _] if op.starts_with('-') => None,
        [a, op, b] => {
            if unresolved(a) || unresolved(b) {
                return None;
            }
            match op.as_str() {
                "=" | "==" | "!=" => {
                    let equal = if patterns { glob_matches(b, a) } else { a == b };
                    Some(equal != (op == "!="))
                }
                "-eq" | "-ne" | "-gt" | "-ge" | "-lt" | "-le" => {
                    let (a, b) = (a.trim().parse::<i64>().ok()?, b.trim().parse::<i64>().ok()?);
                    Some(match op.as_str() {
                        "-eq" => a == b,
                        "-ne" => a != b,
                        "-gt" => a > b,
                        "-ge" => a >= b,
                        "-lt" => a < b,
                        _ => a <= b,
                    })
                }
                _ => None,
            }
        }
        [value] => (!unresolved(value)).then_some(!value.is_empty()),
        [] => Some(false),
        _ => None,
    }
}

pub(super) fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

pub(super) fn or3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

/// `NAME=value`, `NAME+=value` (value possibly `( … )`): the name, whether it appends, the
/// value as written.
pub(super) fn assignment(word: &str) -> Option<(&str, bool, &str)> {
    let eq = word.find('=')?;
    let (name, append) = match word[..eq].strip_suffix('+') {
        Some(name) => (name, true),
        None => (&word[..eq], false),
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some((name, append, &word[eq + 1..]))
}

/// Index of the `)` closing a `case` pattern (outside quotes).
pub(super) fn pattern_end(head: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (at, c) in head.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ')') => return Some(at),
            _ => {}
        }
    }
    None
}

/// Shell glob matching of `text` against `pattern` (`*`, `?`; `[…]` classes are taken
/// literally).
pub(super) fn glob_matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matcher with one backtrack point for the last `*`.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((star_p, star_t)) = star {
            pi = star_p + 1;
            ti = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A Megatron-Bridge / Hydra override: `section.key=value` (`+` and `++` prefixes too).
pub(super) fn is_override(word: &str) -> bool {
    word.split_once('=').is_some_and(|(key, _)| {
        let key = key.trim_start_matches('+');
        key.contains('.') && is_identifier_path(key)
    })
}

pub(super) fn is_python_script(word: &str) -> bool {
    word.ends_with(".py") && !word.starts_with('-') && !word.contains('=')
}

/// The name a function definition defines.
pub(super) fn function_name(words: &[String]) -> Option<String> {
    let name = match words {
        [keyword, name, ..] if keyword == "function" => name,
        [name, ..] => name,
        [] => return None,
    };
    let name = name.trim_end_matches('{').trim_end_matches("()");
    (!name.is_empty()).then(|| name.to_string())
}

/// `name() {`, `name () {` or `function name {`.
pub(super) fn is_function_definition(words: &[String]) -> bool {
    let is_name = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == ':')
    };
    match words {
        [first, ..] if first == "function" => true,
        [first, ..] if first.strip_suffix("()").is_some_and(is_name) => true,
        [first, second, ..] => is_name(first) && second == "()",
        _ => false,
    }
}

pub(super) fn strip_trailing_then(words: &[String]) -> &[String] {
    match words.last() {
        Some(last) if last == "then" => &words[..words.len() - 1],
        _ => words,
    }
}

/// Index of the statement closing the block opened just before `from` (`done`, `esac`),
/// counting nested blocks of the same kind.
pub(super) fn block_end(
    statements: &[String],
    from: usize,
    openers: &[&str],
    closer: &str,
) -> usize {
    let mut depth = 1usize;
    for (at, statement) in statements.iter().enumerate().skip(from) {
        let first = statement.split_whitespace().next().unwrap_or("");
        if openers.contains(&first) {
            depth += 1;
        } else if first == closer {
            depth -= 1;
            if depth == 0 {
                return at;
            }
        }
    }
    statements.len()
}

/// Index of the `}` closing a function body that opened at or after `from - 1`.
pub(super) fn brace_block_end(statements: &[String], from: usize) -> usize {
    let opened_on_definition = statements
        .get(from.saturating_sub(1))
        .is_some_and(|s| s.trim_end().ends_with('{'));
    let mut depth = usize::from(opened_on_definition);
    for (at, statement) in statements.iter().enumerate().skip(from) {
        let trimmed = statement.trim();
        if trimmed.ends_with('{') {
            depth += 1;
        }
        if trimmed.starts_with('}') {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return at;
            }
        }
    }
    statements.len()
}

/// Whether the branch starting at `from` (up to its `elif`/`else`/`fi`) holds a flag.
pub(super) fn branch_sets_flags(statements: &[String], from: usize) -> bool {
    let mut depth = 0usize;
    for statement in &statements[from.min(statements.len())..] {
        let first = statement.split_whitespace().next().unwrap_or("");
        match first {
            "if" => depth += 1,
            "fi" if depth == 0 => return false,
            "fi" => depth -= 1,
            "elif" | "else" if depth == 0 => return false,
            _ => {}
        }
        if holds_flag(statement) {
            return true;
        }
    }
    false
}

/// Whether a block holds a flag.
pub(super) fn block_sets_flags(statements: &[String]) -> bool {
    statements.iter().any(|s| holds_flag(s))
}

/// Whether a statement holds a `--flag` (not a `case` pattern such as `--help)`), as a word
/// or as the value an assignment starts with (`EXTRA="--fp8-format hybrid"`).
pub(super) fn holds_flag(statement: &str) -> bool {
    let starts_flag = |w: &str| w.trim_matches(['"', '\'', '(']).starts_with("--");
    statement.split_whitespace().any(|w| match assignment(w) {
        Some((_, _, value)) => starts_flag(value),
        None => starts_flag(w) && !w.ends_with(')'),
    })
}
