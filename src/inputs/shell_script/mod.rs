//! Launch scripts as bash would run them, far enough to find the training command.
//!
//! Real launch scripts (Megatron-LM's `examples/*/train_*.sh`, sbatch files) keep their flags
//! in variables and arrays, pick some of them in `if` blocks and run the trainer at the end,
//! sometimes inside `bash -c "…"` under `srun`. This evaluates the parts that decide the
//! trainer's words: assignments (`NAME=value`, `${NAME:-default}`, `$((a*b))`), arrays
//! (`NAME=( … )`, `+=`, `"${NAME[@]}"`), `export`, `unset`, `if`/`elif`/`else` on string and
//! number tests, and `-c` strings. Loops, `case` blocks and functions are not run (with no
//! script arguments an argument loop does nothing); a test that depends on the machine (a
//! file, a command's status) counts as false, and is noted when its branch would have set
//! flags. The training command is the executed command with a `*.py` word and the most
//! `--` flags.

use std::collections::HashMap;

use super::launch_script::is_identifier_path;
use crate::model::config::IgnoredSetting;

mod expand;
mod sbatch;
mod tokens;

use tokens::{split_words, statements};

/// The words of a script's training command, as bash would pass them, and what the
/// evaluation assumed or skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingCommand {
    pub words: Vec<String>,
    pub notes: Vec<IgnoredSetting>,
    /// The world size an sbatch file's `#SBATCH` directives ask for (nodes × tasks per node),
    /// with those directives, when the command does not start `torchrun` itself.
    pub sbatch_gpus: Option<(u64, String)>,
}

/// Evaluates `script` and returns its training command; `None` when no executed command runs
/// a Python script.
pub fn training_command(script: &str) -> Option<TrainingCommand> {
    let mut shell = Shell::default();
    shell.run(&statements(script), 0);
    // The command with the most settings; the first of equals (a loop over configurations
    // runs one per item).
    let top = shell.candidates.iter().map(|c| c.flags).max()?;
    let mut equals = shell.candidates.into_iter().filter(|c| c.flags == top);
    let best = equals.next()?;
    let others = equals.filter(|c| c.words != best.words).count();
    let mut notes = shell.notes;
    if others > 0 {
        notes.push(IgnoredSetting::new(
            "other training commands",
            format!(
                "the script runs {} training commands (a loop over configurations, or \
                 alternatives); the first was read, the {others} other(s) were not",
                others + 1
            ),
        ));
    }
    if !shell.defaults.is_empty() {
        notes.push(IgnoredSetting::new(
            "environment defaults",
            format!(
                "variables the script reads from the environment were unset here, so its own \
                 defaults were used: {}; set them in the script (or give the fields) to price \
                 other values",
                shell.defaults.join(", ")
            ),
        ));
    }
    let launches_its_own_ranks = best
        .words
        .iter()
        .any(|w| w.starts_with("--nproc_per_node") || w.starts_with("--nproc-per-node"));
    Some(TrainingCommand {
        sbatch_gpus: sbatch::sbatch_gpus(script).filter(|_| !launches_its_own_ranks),
        words: best.words,
        notes,
    })
}

#[derive(Debug, Clone)]
enum Var {
    Scalar(String),
    Array(Vec<String>),
}

#[derive(Debug)]
struct Candidate {
    words: Vec<String>,
    flags: usize,
}

/// One `if` block: whether its enclosing code runs, and whether a branch was taken.
#[derive(Debug)]
struct IfFrame {
    outer_active: bool,
    taken: bool,
    active: bool,
}

#[derive(Debug)]
struct Shell {
    vars: HashMap<String, Var>,
    ifs: Vec<IfFrame>,
    /// Every executed command that runs a Python script, in order.
    candidates: Vec<Candidate>,
    /// Loop iterations left (nested loops multiply).
    loop_budget: usize,
    notes: Vec<IgnoredSetting>,
    /// `NAME=default` for each `${NAME:-default}` taken because NAME was unset.
    defaults: Vec<String>,
    /// Nesting of `${…}` expansions being expanded (`expand.rs`).
    expansion_depth: usize,
    /// Bytes held by the variables; past `MAX_VARIABLE_BYTES` evaluation stops.
    stopped: bool,
}

/// Bytes of variable values a script may build (arrays that double themselves would grow
/// without end); the evaluation stops, and says so, past it.
const MAX_VARIABLE_BYTES: usize = 1 << 20;

impl Default for Shell {
    fn default() -> Self {
        Shell {
            vars: HashMap::new(),
            ifs: Vec::new(),
            candidates: Vec::new(),
            loop_budget: MAX_LOOP_ITERATIONS,
            notes: Vec::new(),
            defaults: Vec::new(),
            expansion_depth: 0,
            stopped: false,
        }
    }
}

/// Iterations of `for` loops run in all (a loop over a script's configurations has a few).
const MAX_LOOP_ITERATIONS: usize = 64;

/// `-c` strings run nested scripts; deeper nesting than this is not followed.
const MAX_NESTING: usize = 4;

impl Shell {
    fn active(&self) -> bool {
        self.ifs.last().is_none_or(|f| f.active)
    }

    fn run(&mut self, statements: &[String], nesting: usize) {
        let mut at = 0;
        while at < statements.len() && !self.stopped {
            let statement = statements[at].trim();
            at += 1;
            let words = split_words(statement);
            let Some(first) = words.first().map(String::as_str) else {
                continue;
            };
            match first {
                "if" | "elif" => {
                    let test = strip_trailing_then(&words[1..]);
                    let outer_active = if first == "if" {
                        self.active()
                    } else {
                        self.ifs.last().is_some_and(|f| f.outer_active)
                    };
                    let already = first == "elif" && self.ifs.last().is_some_and(|f| f.taken);
                    let holds = if outer_active && !already {
                        let value = self.test(test);
                        if value.is_none() && branch_sets_flags(statements, at) {
                            self.notes.push(IgnoredSetting::new(
                                statement.to_string(),
                                "a test on the machine running the script (a file, a command); \
                                 taken as false, so the flags of its branch were not read",
                            ));
                        }
                        value.unwrap_or(false)
                    } else {
                        false
                    };
                    if first == "if" {
                        self.ifs.push(IfFrame {
                            outer_active,
                            taken: holds,
                            active: holds,
                        });
                    } else if let Some(frame) = self.ifs.last_mut() {
                        frame.active = holds;
                        frame.taken |= holds;
                    }
                }
                "else" => {
                    if let Some(frame) = self.ifs.last_mut() {
                        frame.active = frame.outer_active && !frame.taken;
                        frame.taken = true;
                    }
                    self.run_rest(&words[1..], nesting);
                }
                "fi" => {
                    self.ifs.pop();
                }
                "then" | "do" => self.run_rest(&words[1..], nesting),
                "while" | "until" | "for" | "select" => {
                    let end =
                        block_end(statements, at, &["while", "until", "for", "select"], "done");
                    let body = &statements[at..end.min(statements.len())];
                    if first == "for" && words.get(2).is_some_and(|w| w == "in") {
                        if self.active() {
                            self.for_loop(&words, body, nesting);
                        }
                    } else if self.active() && block_sets_flags(body) {
                        self.notes.push(IgnoredSetting::new(
                            statement.to_string(),
                            "a loop; loops are not run, so the flags it would add were not read",
                        ));
                    }
                    at = (end + 1).min(statements.len());
                }
                "case" => {
                    let end = block_end(statements, at, &["case"], "esac");
                    if self.active() {
                        self.case(&words, &statements[at..end.min(statements.len())], nesting);
                    }
                    at = (end + 1).min(statements.len());
                }
                ";;" => {}
                _ if is_function_definition(&words) => {
                    at = (brace_block_end(statements, at) + 1).min(statements.len());
                }
                _ if self.active() => self.command(&words, nesting),
                _ => {}
            }
        }
    }

    /// Runs what follows a keyword on the same statement (`then cmd`, `else cmd`).
    fn run_rest(&mut self, rest: &[String], nesting: usize) {
        if !rest.is_empty() && self.active() {
            self.command(rest, nesting);
        }
    }

    fn command(&mut self, words: &[String], nesting: usize) {
        let first = words[0].as_str();
        match first {
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                for word in words[1..].iter().filter(|w| !w.starts_with('-')) {
                    if let Some((name, _, _)) = assignment(word) {
                        if first == "export" {
                            self.notes.push(IgnoredSetting::new(
                                format!("export {word}"),
                                format!(
                                    "environment variable `{name}`; the cost model reads no \
                                     environment"
                                ),
                            ));
                        }
                        self.assign(word);
                    }
                }
                return;
            }
            "source" | "." if words.len() > 1 => {
                self.notes.push(IgnoredSetting::new(
                    words.join(" "),
                    "another file: not read, so what it sets is unset here",
                ));
                return;
            }
            "unset" => {
                for name in &words[1..] {
                    self.vars.remove(name);
                }
                return;
            }
            _ => {}
        }
        let assignments = words.iter().take_while(|w| assignment(w).is_some()).count();
        if assignments == words.len() {
            for word in words {
                self.assign(word);
            }
            return;
        }
        if words[assignments] == "read" {
            self.read(&words[..assignments], &words[assignments..]);
            return;
        }
        // `NAME=value cmd …`: the assignments are the command's environment.
        let mut expanded: Vec<String> = Vec::new();
        let mut bytes = 0usize;
        for word in &words[assignments..] {
            for piece in self.expand(word) {
                bytes += piece.len() + 1;
                expanded.push(piece);
            }
            if bytes > MAX_VARIABLE_BYTES {
                self.stopped = true;
                self.notes.push(IgnoredSetting::new(
                    words[0].clone(),
                    format!(
                        "this command expands past {} MiB; evaluation stopped, so it and \
                         what follows were not read",
                        MAX_VARIABLE_BYTES >> 20
                    ),
                ));
                return;
            }
        }
        if nesting < MAX_NESTING {
            // `bash -c "…"` (also `-lc`, `-xc`: short options clustered), after the shell's
            // name; `python -c` runs Python, not a script of this kind.
            let is_command_option = |w: &String| {
                w.len() > 1
                    && w.starts_with('-')
                    && !w.starts_with("--")
                    && w.ends_with('c')
                    && w[1..].chars().all(|c| c.is_ascii_lowercase())
            };
            let shell_at = expanded
                .iter()
                .position(|w| matches!(w.rsplit('/').next(), Some("bash" | "sh" | "zsh" | "dash")));
            let option_at = shell_at.and_then(|shell| {
                expanded[shell + 1..]
                    .iter()
                    .position(is_command_option)
                    .map(|p| shell + 1 + p)
            });
            if let Some(at) = option_at {
                if let Some(inner) = expanded.get(at + 1) {
                    let inner = statements(inner);
                    self.run(&inner, nesting + 1);
                }
            }
        }
        // `echo "$CMD"` prints the command a script is about to run; it runs nothing.
        let prints = matches!(
            expanded.first().map(String::as_str),
            Some("echo" | "printf" | "cat" | "logger" | ":" | "tee")
        );
        if !prints && expanded.iter().any(|w| is_python_script(w)) {
            // Megatron-LM flags and Megatron-Bridge `section.key=value` overrides.
            let flags = expanded
                .iter()
                .filter(|w| w.starts_with("--") || is_override(w))
                .count();
            let mut words: Vec<String> = words[..assignments].to_vec();
            words.extend(expanded);
            self.candidates.push(Candidate { words, flags });
        }
    }

    /// `case WORD in PATTERN) … ;; … esac`: the first branch whose pattern (`*`, `?`, `a|b`)
    /// matches runs.
    fn case(&mut self, words: &[String], body: &[String], nesting: usize) {
        let Some(subject) = words.get(1) else {
            return;
        };
        let subject = self.expand(subject).join(" ");
        let mut branches: Vec<&[String]> = Vec::new();
        let mut depth = 0usize;
        let mut start = 0;
        for (at, statement) in body.iter().enumerate() {
            match statement.split_whitespace().next().unwrap_or("") {
                "case" => depth += 1,
                "esac" => depth = depth.saturating_sub(1),
                ";;" if depth == 0 => {
                    branches.push(&body[start..at]);
                    start = at + 1;
                }
                _ => {}
            }
        }
        branches.push(&body[start..]);
        for branch in branches {
            let Some((head, rest)) = branch.split_first() else {
                continue;
            };
            let Some(close) = pattern_end(head) else {
                continue;
            };
            let patterns = head[..close].trim().trim_start_matches('(');
            let matched = patterns.split('|').any(|pattern| {
                let pattern = self.expand(pattern.trim()).join(" ");
                glob_matches(&pattern, &subject)
            });
            if matched {
                let first = head[close + 1..].trim();
                let mut statements: Vec<String> = Vec::new();
                if !first.is_empty() {
                    statements.push(first.to_string());
                }
                statements.extend(rest.iter().cloned());
                self.run(&statements, nesting);
                return;
            }
        }
    }

    /// `for NAME in WORDS; do … done`: the body run once per item, within the loop budget.
    fn for_loop(&mut self, words: &[String], body: &[String], nesting: usize) {
        let name = words[1].clone();
        let items: Vec<String> = words[3..].iter().flat_map(|w| self.expand(w)).collect();
        for (done, item) in items.iter().enumerate() {
            if self.loop_budget == 0 || self.stopped {
                self.notes.push(IgnoredSetting::new(
                    words.join(" "),
                    format!(
                        "a loop run {done} of {} times: the evaluation's loop budget ran out",
                        items.len()
                    ),
                ));
                return;
            }
            self.loop_budget -= 1;
            self.vars.insert(name.clone(), Var::Scalar(item.clone()));
            self.run(body, nesting);
        }
    }

    /// `IFS=, read -r A B C <<< "$LINE"`: the here-string split on IFS into the names, the
    /// last taking the rest. Without a here-string (input from a pipe or a file) the names are
    /// left unset.
    fn read(&mut self, environment: &[String], words: &[String]) {
        let ifs = environment
            .iter()
            .find_map(|w| w.strip_prefix("IFS="))
            .map(|v| self.expand(v).join(""))
            .or_else(|| match self.vars.get("IFS") {
                Some(Var::Scalar(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_else(|| " \t\n".to_string());
        let mut names = Vec::new();
        let mut input: Option<String> = None;
        let mut at = 1;
        while at < words.len() {
            let word = &words[at];
            if let Some(rest) = word.strip_prefix("<<<") {
                let text = if rest.is_empty() {
                    at += 1;
                    words.get(at).cloned().unwrap_or_default()
                } else {
                    rest.to_string()
                };
                input = Some(self.expand(&text).join(" "));
            } else if word == "-a" || word == "-d" || word == "-p" || word == "-t" || word == "-n" {
                at += 1;
            } else if !word.starts_with('-') {
                names.push(word.clone());
            }
            at += 1;
        }
        let Some(input) = input else {
            return;
        };
        let separators: Vec<char> = ifs.chars().collect();
        let is_separator = |c: char| separators.contains(&c);
        let mut rest = input.trim_matches(|c: char| c.is_whitespace() && is_separator(c));
        for (index, name) in names.iter().enumerate() {
            let value = if index + 1 == names.len() {
                let value = rest.to_string();
                rest = "";
                value
            } else {
                match rest.find(is_separator) {
                    Some(cut) => {
                        let value = rest[..cut].to_string();
                        rest = &rest[cut + 1..];
                        value
                    }
                    None => std::mem::take(&mut rest).to_string(),
                }
            };
            self.vars.insert(name.clone(), Var::Scalar(value));
        }
    }

    fn assign(&mut self, word: &str) {
        let Some((name, append, value)) = assignment(word) else {
            return;
        };
        let new = match value.strip_prefix('(').and_then(|v| v.strip_suffix(')')) {
            Some(items) => Var::Array(
                split_words(items)
                    .iter()
                    .flat_map(|w| self.expand(w))
                    .collect(),
            ),
            None => Var::Scalar(self.expand(value).join(" ")),
        };
        let merged = match (append, self.vars.remove(name), new) {
            (true, Some(Var::Array(mut old)), Var::Array(new)) => {
                old.extend(new);
                Var::Array(old)
            }
            (true, Some(Var::Array(mut old)), Var::Scalar(new)) => {
                match old.first_mut() {
                    Some(first) => first.push_str(&new),
                    None => old.push(new),
                }
                Var::Array(old)
            }
            (true, Some(Var::Scalar(old)), Var::Array(new)) => {
                let mut all = vec![old];
                all.extend(new);
                Var::Array(all)
            }
            (true, Some(Var::Scalar(old)), Var::Scalar(new)) => Var::Scalar(old + &new),
            (_, _, new) => new,
        };
        let bytes = |v: &Var| match v {
            Var::Scalar(s) => s.len(),
            Var::Array(items) => items.iter().map(|i| i.len() + 1).sum(),
        };
        let held: usize = self.vars.values().map(bytes).sum::<usize>() + bytes(&merged);
        if held > MAX_VARIABLE_BYTES {
            self.stopped = true;
            self.notes.push(IgnoredSetting::new(
                word.chars().take(80).collect::<String>(),
                format!(
                    "the script's variables grew past {} MiB here; evaluation stopped, so                      nothing after this line was read",
                    MAX_VARIABLE_BYTES >> 20
                ),
            ));
            return;
        }
        self.vars.insert(name.to_string(), merged);
    }

    /// A `[ … ]`, `[[ … ]]` or `test …` list joined by `&&` / `||`: `None` when it depends on
    /// something this evaluation cannot know.
    fn test(&mut self, words: &[String]) -> Option<bool> {
        let expanded: Vec<Vec<String>> = words.iter().map(|w| self.expand(w)).collect();
        let mut result: Option<bool> = Some(true);
        let mut join = "&&";
        let mut at = 0;
        while at < words.len() {
            let mut negate = false;
            if words[at] == "!" {
                negate = true;
                at += 1;
            }
            let (value, next) = match words.get(at).map(String::as_str) {
                Some(open @ ("[" | "[[")) => {
                    let close = if open == "[" { "]" } else { "]]" };
                    let end = words[at..]
                        .iter()
                        .position(|w| w == close)
                        .map_or(words.len(), |p| at + p);
                    let operands: Vec<String> = expanded[at + 1..end]
                        .iter()
                        .flat_map(|w| w.iter().cloned())
                        .collect();
                    (bracket_test(&operands), end + 1)
                }
                Some("test") => {
                    let end = words[at..]
                        .iter()
                        .position(|w| w == "&&" || w == "||")
                        .map_or(words.len(), |p| at + p);
                    let operands: Vec<String> = expanded[at + 1..end]
                        .iter()
                        .flat_map(|w| w.iter().cloned())
                        .collect();
                    (bracket_test(&operands), end)
                }
                _ => {
                    // A command's exit status.
                    let end = words[at..]
                        .iter()
                        .position(|w| w == "&&" || w == "||")
                        .map_or(words.len(), |p| at + p);
                    (None, end)
                }
            };
            let value = if negate { value.map(|v| !v) } else { value };
            result = match join {
                "||" => or3(result, value),
                _ => and3(result, value),
            };
            at = next;
            if let Some(op) = words.get(at) {
                join = if op == "||" { "||" } else { "&&" };
                at += 1;
            }
        }
        result
    }
}

/// The operands of one `[ … ]` / `[[ … ]]` / `test`, expanded.
fn bracket_test(operands: &[String]) -> Option<bool> {
    // Each `||`, `&&` and `!` below recurses once; longer tests are left unknown.
    if operands.len() > 64 {
        return None;
    }
    // `[[ a && b ]]`, `[[ a || b ]]` inside one bracket.
    if let Some(at) = operands.iter().position(|w| w == "||") {
        return or3(
            bracket_test(&operands[..at]),
            bracket_test(&operands[at + 1..]),
        );
    }
    if let Some(at) = operands.iter().position(|w| w == "&&" || w == "-a") {
        return and3(
            bracket_test(&operands[..at]),
            bracket_test(&operands[at + 1..]),
        );
    }
    if let Some(rest) = operands
        .first()
        .filter(|w| *w == "!")
        .map(|_| &operands[1..])
    {
        return bracket_test(rest).map(|v| !v);
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
                "=" | "==" => Some(a == b),
                "!=" => Some(a != b),
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

fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn or3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

/// `NAME=value`, `NAME+=value` (value possibly `( … )`): the name, whether it appends, the
/// value as written.
fn assignment(word: &str) -> Option<(&str, bool, &str)> {
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
fn pattern_end(head: &str) -> Option<usize> {
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
fn glob_matches(pattern: &str, text: &str) -> bool {
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
fn is_override(word: &str) -> bool {
    word.split_once('=').is_some_and(|(key, _)| {
        let key = key.trim_start_matches('+');
        key.contains('.') && is_identifier_path(key)
    })
}

fn is_python_script(word: &str) -> bool {
    word.ends_with(".py") && !word.starts_with('-') && !word.contains('=')
}

/// `name() {`, `name () {` or `function name {`.
fn is_function_definition(words: &[String]) -> bool {
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

fn strip_trailing_then(words: &[String]) -> &[String] {
    match words.last() {
        Some(last) if last == "then" => &words[..words.len() - 1],
        _ => words,
    }
}

/// Index of the statement closing the block opened just before `from` (`done`, `esac`),
/// counting nested blocks of the same kind.
fn block_end(statements: &[String], from: usize, openers: &[&str], closer: &str) -> usize {
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
fn brace_block_end(statements: &[String], from: usize) -> usize {
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
fn branch_sets_flags(statements: &[String], from: usize) -> bool {
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
fn block_sets_flags(statements: &[String]) -> bool {
    statements.iter().any(|s| holds_flag(s))
}

/// Whether a statement holds a `--flag` (not a `case` pattern such as `--help)`).
fn holds_flag(statement: &str) -> bool {
    statement
        .split_whitespace()
        .any(|w| w.trim_matches(['"', '\'', '(']).starts_with("--") && !w.ends_with(')'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(script: &str) -> Vec<String> {
        training_command(script)
            .unwrap_or_else(|| panic!("no training command in {script}"))
            .words
    }

    #[test]
    fn arrays_defaults_and_arithmetic_expand_as_bash_does() {
        let script = r#"#!/bin/bash
CKPT=${1:-"checkpoints/x"}   # positional with a default
GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
mkdir -p "$(dirname "$CKPT")"
DIST=(
    --nproc_per_node $GPUS_PER_NODE   # per node
    --nnodes $NUM_NODES
)
MODEL=(
    --num-layers 4
    --hidden-size 1024
)
DTYPE="fp8"
EXTRA=()
if [[ "$DTYPE" == "fp8" ]]; then
    EXTRA+=(
        "--fp8-format hybrid"
        "--fp8-param-gather"
    )
else
    EXTRA+=(--bf16)
fi
MODEL+=("${EXTRA[@]}")
torchrun ${DIST[@]} \
    "pretrain_gpt.py" \
    ${MODEL[@]} --pipeline-model-parallel-size $WORLD_SIZE --save "$CKPT"
"#;
        assert_eq!(
            command(script),
            [
                "torchrun",
                "--nproc_per_node",
                "8",
                "--nnodes",
                "2",
                "pretrain_gpt.py",
                "--num-layers",
                "4",
                "--hidden-size",
                "1024",
                "--fp8-format",
                "hybrid",
                "--fp8-param-gather",
                "--pipeline-model-parallel-size",
                "16",
                "--save",
                "checkpoints/x",
            ]
        );
        let notes = training_command(script)
            .map(|c| c.notes)
            .unwrap_or_default();
        assert!(notes
            .iter()
            .any(|n| n.key == "environment defaults" && n.reason.contains("NUM_NODES=2")));
    }

    #[test]
    fn quoted_array_elements_stay_whole_and_unset_variables_stay_visible() {
        let script = "ARGS=(\"--split 99,1,0\" --seq-length 4096)\n\
                      python pretrain_gpt.py \"${ARGS[@]}\" --nnodes $SLURM_NNODES\n";
        assert_eq!(
            command(script),
            [
                "python",
                "pretrain_gpt.py",
                "--split 99,1,0",
                "--seq-length",
                "4096",
                "--nnodes",
                "$SLURM_NNODES"
            ]
        );
    }

    #[test]
    fn what_cannot_be_expanded_stays_one_word_as_written() {
        let script = "CMD=\"python pretrain_gpt.py --x=$(hostname -s) --y $((UNSET * 2))\"\n\
                      bash -c \"$CMD\"\n";
        assert_eq!(
            command(script),
            [
                "python",
                "pretrain_gpt.py",
                "--x=$(hostname -s)",
                "--y",
                "$((UNSET * 2))"
            ]
        );
    }

    #[test]
    fn an_echo_that_only_squeezes_blanks_is_computed() {
        let script = "O=\"\n  model.seq_length=4096 \\\n  train.micro_batch_size=2\"\n\
                      CMD=\"python run_recipe.py --recipe r $(echo \"$O\" | tr '\\n' ' ' | sed 's/  \\+/ /g')\"\n\
                      bash -c \"$CMD\"\n";
        assert_eq!(
            command(script),
            [
                "python",
                "run_recipe.py",
                "--recipe",
                "r",
                "model.seq_length=4096",
                "train.micro_batch_size=2"
            ]
        );
        // Another filter is not computed: the substitution stays as written.
        let other = "python x.py --a $(echo 1 | sed 's/1/2/g')\n";
        assert_eq!(command(other)[3], "$(echo 1 | sed 's/1/2/g')");
    }

    #[test]
    fn machine_tests_are_false_and_noted_when_they_hold_flags() {
        let script = "ARGS=\"--bf16\"\n\
                      if [ -f /etc/fast ]; then\n  ARGS=\"$ARGS --fp8-format hybrid\"\nfi\n\
                      if [ ! -f pretrain_gpt.py ]; then echo missing; exit 1; fi\n\
                      while [[ $# -gt 0 ]]; do\n  case $1 in\n    --x) shift ;;\n  esac\ndone\n\
                      python pretrain_gpt.py $ARGS\n";
        let read = training_command(script).unwrap_or_else(|| panic!("no command"));
        assert_eq!(read.words, ["python", "pretrain_gpt.py", "--bf16"]);
        // The argument loop's `--x)` is a case pattern, not a flag: no note for it.
        assert_eq!(read.notes.len(), 1, "{:?}", read.notes);
        assert!(read.notes[0].key.starts_with("if [ -f /etc/fast ]"));
    }

    #[test]
    fn a_command_string_run_by_srun_is_followed() {
        let script = "TP=${TP:-2}\nARGS=(--tensor-model-parallel-size ${TP} --bf16)\n\
                      CMD=\"\ncd /workspace;\nexport PYTHONPATH=/workspace;\n\
                      python /workspace/pretrain_gpt.py ${ARGS[@]}\"\n\
                      sbatch <<EOF\nsrun --mpi=pmix bash -x -c \"${CMD}\" 2>&1 | tee log\nEOF\n";
        assert_eq!(training_command(script).and_then(|c| c.sbatch_gpus), None);
        let with_nodes = format!("#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=8\n{script}");
        assert_eq!(
            training_command(&with_nodes)
                .and_then(|c| c.sbatch_gpus)
                .map(|g| g.0),
            Some(32)
        );
        assert_eq!(
            command(script),
            [
                "python",
                "/workspace/pretrain_gpt.py",
                "--tensor-model-parallel-size",
                "2",
                "--bf16"
            ]
        );
    }

    #[test]
    fn clustered_shell_options_run_their_string_and_python_c_does_not() {
        let script = "srun bash -lc \"set -euo pipefail; python train.py --seq-length 8\"\n";
        assert_eq!(command(script), ["python", "train.py", "--seq-length", "8"]);
        let python = "python -c \"import os; os.system('python x.py --a 1')\" run.py --b 2\n";
        assert_eq!(
            command(python)[..2],
            ["python".to_string(), "-c".to_string()]
        );
    }

    #[test]
    fn elif_and_else_take_exactly_one_branch() {
        let script = "P=bf16\nif [ \"$P\" = fp8 ]; then A=--fp8-format; \
                      elif [ \"$P\" = bf16 ]; then A=--bf16; else A=--fp16; fi\n\
                      python pretrain_gpt.py $A\n";
        assert_eq!(command(script), ["python", "pretrain_gpt.py", "--bf16"]);
    }

    #[test]
    fn a_loop_over_configurations_reads_the_first_and_names_the_rest() {
        let script = "CONFIGS=(\"2,4\" \"4,2\")\n\
                      for CONFIG in \"${CONFIGS[@]}\"; do\n\
                      \x20 IFS=',' read -r TP PP <<< \"$CONFIG\"\n\
                      \x20 CMD=\"python run_recipe.py --recipe x_pretrain_config\"\n\
                      \x20 CMD=\"$CMD model.tensor_model_parallel_size=$TP model.pipeline_model_parallel_size=$PP\"\n\
                      \x20 srun bash -c \"$CMD\"\n\
                      done\n";
        let read = training_command(script).unwrap_or_else(|| panic!("no command"));
        assert_eq!(
            read.words,
            [
                "python",
                "run_recipe.py",
                "--recipe",
                "x_pretrain_config",
                "model.tensor_model_parallel_size=2",
                "model.pipeline_model_parallel_size=4"
            ]
        );
        assert!(read.notes.iter().any(
            |n| n.key == "other training commands" && n.reason.contains("2 training commands")
        ));
    }

    #[test]
    fn read_splits_a_here_string_on_ifs() {
        let mut shell = Shell::default();
        let words = |text: &str| split_words(text);
        shell.read(&words("IFS=,"), &words("read -r A B C <<< a,b,c,d"));
        let get = |shell: &Shell, name: &str| match shell.vars.get(name) {
            Some(Var::Scalar(s)) => s.clone(),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(get(&shell, "A"), "a");
        assert_eq!(get(&shell, "B"), "b");
        // The last name takes the rest, separators included.
        assert_eq!(get(&shell, "C"), "c,d");
        shell.read(&[], &words("read X Y <<< \"one two three\""));
        assert_eq!(get(&shell, "X"), "one");
        assert_eq!(get(&shell, "Y"), "two three");
    }

    #[test]
    fn case_runs_the_first_matching_branch_and_echo_runs_nothing() {
        let script = "DATASET=${DATASET:-squad}\n\
                      case \"$DATASET\" in\n\
                      \x20 openmath*)\n    SEQ=4096\n    ;;\n\
                      \x20 squad|custom) SEQ=2048 ;;\n\
                      \x20 *) SEQ=1024 ;;\n\
                      esac\n\
                      CMD=\"python pretrain_gpt.py \\\n  --seq-length $SEQ\"\n\
                      echo $CMD --and-more\n\
                      $CMD\n";
        assert_eq!(
            command(script),
            ["python", "pretrain_gpt.py", "--seq-length", "2048"]
        );
        assert!(glob_matches("open*2*", "openmathinstruct2_thinking"));
        assert!(glob_matches("a?c", "abc"));
        assert!(!glob_matches("a*d", "abc"));
    }

    #[test]
    fn a_script_without_a_python_command_has_none() {
        assert!(training_command("--tensor-model-parallel-size 2 --bf16").is_none());
        assert!(training_command("echo hello\nexit 0\n").is_none());
    }

    #[test]
    fn self_doubling_arrays_stop_the_evaluation_and_say_so() {
        let mut script = String::from("A=(--x 1)\n");
        for _ in 0..40 {
            script.push_str("A=(\"${A[@]}\" \"${A[@]}\")\n");
        }
        script.push_str("python pretrain_gpt.py ${A[@]}\n");
        let read = training_command(&script);
        // Stopped before the command: no command, and nothing grew without bound.
        assert!(read.is_none());
        let nested = format!(
            "X=${{{}}}\npython pretrain_gpt.py $X\n",
            "A:-${".repeat(500)
        );
        let _ = training_command(&nested);
        let deep = format!(
            "X=$(({}1{}))\npython pretrain_gpt.py $X\n",
            "(".repeat(5000),
            ")".repeat(5000)
        );
        let _ = training_command(&deep);
    }

    #[test]
    fn arithmetic_refuses_what_it_cannot_compute() {
        let mut shell = Shell::default();
        assert_eq!(shell.arithmetic("2 * (3 + 4) - 1"), Some(13));
        assert_eq!(shell.arithmetic("$UNSET * 2"), None);
        assert_eq!(shell.arithmetic("9223372036854775807 + 1"), None);
        assert_eq!(shell.arithmetic("1 / 0"), None);
    }
}
