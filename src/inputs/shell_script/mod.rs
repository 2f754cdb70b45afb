//! Launch scripts as bash would run them, far enough to find the training command.
//!
//! Real launch scripts (Megatron-LM's `examples/*/train_*.sh`, sbatch files) keep their flags
//! in variables and arrays, pick some of them in `if` blocks and run the trainer at the end,
//! sometimes inside `bash -c "…"` under `srun`. This evaluates the parts that decide the
//! trainer's words: assignments (`NAME=value`, `${NAME:-default}`, `$((a*b))`), arrays
//! (`NAME=( … )`, `+=`, `"${NAME[@]}"`), `export`, `unset`, `read … <<<`, `if`/`elif`/`else`
//! on string and number tests, `case`, `for` and `while` loops (within a budget, with `break`
//! and `continue`), `&&` / `||` lists, calls of the script's own functions (with their
//! arguments), commands in `if` conditions, and `-c` strings (`control.rs`). The script runs
//! without arguments, so an argument-parsing loop does nothing; a test that depends on the
//! machine (a file, a command's status) counts as false, and is noted when what it guards
//! would have set flags; other commands are taken to succeed; a here-document fed to Python is
//! skipped. The training command is the executed command with a `*.py` word and the most `--`
//! flags.

use std::collections::HashMap;

use super::bridge_launcher::is_bridge_shell_launcher;
use crate::model::config::IgnoredSetting;

mod control;
mod expand;
mod sbatch;
mod syntax;
#[cfg(test)]
mod tests;
mod tokens;

use control::LoopControl;
use syntax::{
    and3, assignment, block_end, block_sets_flags, brace_block_end, bracket_test,
    branch_sets_flags, function_name, is_function_definition, is_override, is_python_script, or3,
    strip_trailing_then,
};
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

/// What a script without a training command runs instead.
#[derive(Debug, Clone, PartialEq)]
pub struct NoTrainingCommand {
    /// The programs its executed commands start (`./scripts/conversion/convert.sh`), in order,
    /// without shell builtins and file utilities; empty when it runs none (a bare argument
    /// list, or only assignments).
    pub programs: Vec<String>,
    /// What the evaluation could not see into (sourced files, untaken branches): the
    /// command may be there.
    pub unread: Vec<IgnoredSetting>,
    /// Variables holding `--` flags, for a script that sources this one to run
    /// (`MODEL_ARGS="--num-layers 48 …"`), by name.
    pub flag_variables: Vec<String>,
    /// Shell builtins and utilities it runs (`set`, `pip`), when it runs nothing else.
    pub utilities: Vec<String>,
    /// Functions it defines and never calls (a library of functions another script sources).
    pub uncalled_functions: Vec<String>,
}

/// Evaluates `script` and returns its training command; what it runs instead when no executed
/// command runs a Python script.
pub fn training_command(script: &str) -> Result<TrainingCommand, NoTrainingCommand> {
    let mut shell = Shell::default();
    shell.run(&statements(script), 0);
    // The command with the most settings; the first of equals (a loop over configurations
    // runs one per item).
    let mut candidates = std::mem::take(&mut shell.candidates);
    let top = candidates.iter().map(|c| c.flags).max();
    let Some(best_at) = top.and_then(|top| candidates.iter().position(|c| c.flags == top)) else {
        return Err(shell.no_training_command());
    };
    let best = candidates.remove(best_at);
    let others = candidates
        .iter()
        .filter(|c| c.flags == best.flags && c.words != best.words)
        .count();
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
    Ok(TrainingCommand {
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
    /// The programs other executed commands start (`NoTrainingCommand::programs`).
    programs: Vec<String>,
    /// The builtins and utilities they run (`NoTrainingCommand::utilities`).
    utilities: Vec<String>,
    /// Functions the script defined, by name: their bodies' statements, run when called.
    functions: HashMap<String, Vec<String>>,
    /// Functions called so far, by name.
    called_functions: Vec<String>,
    /// Function bodies being run around the current statement (0 at the script's top level,
    /// where `"$@"` is the script's own arguments).
    function_depth: usize,
    /// The arguments of the function being run (`$1`, `$@`, `$#`); none at the top level,
    /// where the script runs without arguments.
    positional: Vec<String>,
    /// Loop iterations left (nested loops multiply).
    loop_budget: usize,
    /// Loops being run around the current statement (`break` outside one does nothing).
    loop_depth: usize,
    /// A `break` / `continue` that ends the statements of the loop body being run.
    loop_control: Option<LoopControl>,
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
            programs: Vec::new(),
            utilities: Vec::new(),
            functions: HashMap::new(),
            called_functions: Vec::new(),
            function_depth: 0,
            positional: Vec::new(),
            loop_budget: MAX_LOOP_ITERATIONS,
            loop_depth: 0,
            loop_control: None,
            notes: Vec::new(),
            defaults: Vec::new(),
            expansion_depth: 0,
            stopped: false,
        }
    }
}

/// Commands a launch script runs around its training command, which start no program of
/// interest: builtins, file and process utilities, launchers whose own command is read, and
/// shells (their `-c` strings are followed).
const NOT_PROGRAMS: &[&str] = &[
    "set",
    "cd",
    "pushd",
    "popd",
    "exit",
    "return",
    "trap",
    "wait",
    "true",
    "false",
    "sleep",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "ln",
    "touch",
    "chmod",
    "date",
    "hostname",
    "ulimit",
    "umask",
    "env",
    "exec",
    "eval",
    "srun",
    "mpirun",
    "bash",
    "sh",
    "zsh",
    "dash",
    "nvidia-smi",
    "scontrol",
    "squeue",
    "pip",
    "uv",
    "git",
    "wget",
    "curl",
    "huggingface-cli",
    "hf",
    "ls",
    "sed",
    "awk",
    "grep",
    "head",
    "tail",
    "tr",
    "cut",
    "wc",
    "sort",
    "test",
    "[",
    "[[",
    "mapfile",
    "readarray",
    "command",
    "type",
    "which",
    "source",
];

/// Characters of a program's name kept in `NoTrainingCommand` (a command substitution can
/// spell a whole heredoc).
const MAX_PROGRAM_CHARS: usize = 80;

/// Programs named in `NoTrainingCommand` at most.
const MAX_PROGRAMS_NAMED: usize = 6;

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
        while at < statements.len() && !self.stopped && self.loop_control.is_none() {
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
                        let value = self.test(test, nesting);
                        if value.is_none() && branch_sets_flags(statements, at) {
                            self.notes.push(IgnoredSetting::unread(
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
                    // `fi && cmd`: the block's status is taken as success.
                    if self.active() {
                        self.list_tail(&words, 1, Some(true), nesting);
                    }
                }
                "then" | "do" => self.run_rest(&words[1..], nesting),
                "while" | "until" | "for" | "select" => {
                    let end =
                        block_end(statements, at, &["while", "until", "for", "select"], "done");
                    let body = &statements[at..end.min(statements.len())];
                    let active = self.active();
                    if first == "for" && words.get(2).is_some_and(|w| w == "in") {
                        if active {
                            self.for_loop(&words, body, nesting);
                        }
                    } else if matches!(first, "while" | "until") {
                        if active {
                            self.while_loop(statement, &words, body, nesting);
                        }
                    } else if active && block_sets_flags(body) {
                        self.notes.push(IgnoredSetting::unread(
                            statement.to_string(),
                            "a loop; loops are not run, so the flags it would add were not read",
                        ));
                    }
                    self.block_end_tail(statements.get(end), nesting);
                    at = (end + 1).min(statements.len());
                }
                "case" => {
                    let end = block_end(statements, at, &["case"], "esac");
                    if self.active() {
                        self.case(&words, &statements[at..end.min(statements.len())], nesting);
                    }
                    self.block_end_tail(statements.get(end), nesting);
                    at = (end + 1).min(statements.len());
                }
                ";;" => {}
                _ if is_function_definition(&words) => {
                    let end = brace_block_end(statements, at);
                    if self.active() {
                        if let Some(name) = function_name(&words) {
                            // `at` is already past the definition's own statement.
                            let body = statements
                                .get(at..end.min(statements.len()))
                                .unwrap_or_default()
                                .iter()
                                .filter(|s| s.trim() != "{")
                                .cloned()
                                .collect();
                            self.functions.insert(name, body);
                        }
                    }
                    at = (end + 1).min(statements.len());
                }
                _ if self.active() => self.and_or_list(&words, nesting),
                _ => {}
            }
        }
    }

    /// Runs what follows a keyword on the same statement (`then cmd`, `else cmd`).
    fn run_rest(&mut self, rest: &[String], nesting: usize) {
        if !rest.is_empty() && self.active() {
            self.and_or_list(rest, nesting);
        }
    }

    /// `done && cmd`, `esac || cmd`: the rest of a list after a loop or `case` block, whose
    /// status is taken as success.
    fn block_end_tail(&mut self, end: Option<&String>, nesting: usize) {
        let Some(end) = end else {
            return;
        };
        let words = split_words(end);
        if words.len() > 1 && self.active() && !self.stopped {
            self.list_tail(&words, 1, Some(true), nesting);
        }
    }

    fn command(&mut self, words: &[String], nesting: usize) {
        let first = words[0].as_str();
        match first {
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                for word in words[1..].iter().filter(|w| !w.starts_with('-')) {
                    if assignment(word).is_some() {
                        if first == "export" {
                            self.notes.push(IgnoredSetting::new(
                                format!("export {word}"),
                                crate::inputs::environment::UNREAD,
                            ));
                        }
                        self.assign(word);
                    }
                }
                return;
            }
            "source" | "." if words.len() > 1 => {
                self.notes.push(IgnoredSetting::unread(
                    words.join(" "),
                    "another file: not read, so what it sets is unset here",
                ));
                return;
            }
            "break" | "continue" if self.loop_depth > 0 => {
                self.loop_control = Some(if first == "break" {
                    LoopControl::Break
                } else {
                    LoopControl::Continue
                });
                return;
            }
            "shift" => {
                let count = words
                    .get(1)
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or(1)
                    .min(self.positional.len());
                self.positional.drain(..count);
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
                self.notes.push(IgnoredSetting::unread(
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
        // A call of a function the script defined runs its body with the call's arguments.
        let function = expanded
            .first()
            .and_then(|name| self.functions.get(name))
            .cloned();
        if let Some(body) = function {
            if !self.called_functions.contains(&expanded[0]) {
                self.called_functions.push(expanded[0].clone());
            }
            if nesting < MAX_NESTING {
                let arguments = expanded.get(1..).unwrap_or_default().to_vec();
                let outer = std::mem::replace(&mut self.positional, arguments);
                self.function_depth += 1;
                self.run(&body, nesting + 1);
                self.function_depth -= 1;
                self.positional = outer;
            }
            return;
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
        if prints {
            return;
        }
        if expanded
            .iter()
            .any(|w| is_python_script(w) || is_bridge_shell_launcher(w))
        {
            // Megatron-LM flags and Megatron-Bridge `section.key=value` overrides.
            let flags = expanded
                .iter()
                .filter(|w| w.starts_with("--") || is_override(w))
                .count();
            // A wrapper passing its own arguments on (`exec python train.py "$@"`): the
            // script is read as run without any, so what they set is not known.
            let forwards_arguments = words[assignments..].iter().any(|w| {
                ["$@", "${@}", "$*", "${*}"]
                    .iter()
                    .any(|all| w.contains(all))
            });
            if forwards_arguments && self.function_depth == 0 {
                let key = "\"$@\"".to_string();
                if !self.notes.iter().any(|n| n.key == key) {
                    self.notes.push(IgnoredSetting::unread(
                        key,
                        "the arguments the script is run with, passed on to the training \
                         command; it was read as run without any, so the settings they carry \
                         are not read: send the command line with them",
                    ));
                }
            }
            let mut words: Vec<String> = words[..assignments].to_vec();
            words.extend(expanded);
            self.candidates.push(Candidate { words, flags });
        } else {
            self.note_program(&expanded);
        }
    }

    /// What the script ran instead of a training command.
    fn no_training_command(self) -> NoTrainingCommand {
        let holds_flags = |v: &Var| match v {
            Var::Scalar(s) => s.split_whitespace().any(|w| w.starts_with("--")),
            Var::Array(items) => items.iter().any(|w| w.starts_with("--")),
        };
        let mut flag_variables: Vec<String> = self
            .vars
            .iter()
            .filter(|(_, v)| holds_flags(v))
            .map(|(name, _)| name.clone())
            .collect();
        flag_variables.sort();
        flag_variables.truncate(MAX_PROGRAMS_NAMED);
        let mut uncalled_functions: Vec<String> = self
            .functions
            .keys()
            .filter(|name| !self.called_functions.contains(name))
            .cloned()
            .collect();
        uncalled_functions.sort();
        uncalled_functions.truncate(MAX_PROGRAMS_NAMED);
        NoTrainingCommand {
            programs: self.programs,
            unread: self.notes.into_iter().filter(|n| n.unread).collect(),
            flag_variables,
            utilities: self.utilities,
            uncalled_functions,
        }
    }

    /// Records the program a command without a Python script starts, unless it is a shell
    /// builtin or file utility (what every launch script runs around its training command),
    /// a bare argument list, or a shell whose `-c` string was followed.
    fn note_program(&mut self, expanded: &[String]) {
        let Some(first) = expanded.first() else {
            return;
        };
        let name = first.rsplit('/').next().unwrap_or(first);
        // A program is named by a path or a name (or a variable or substitution giving one);
        // a line of text a here-document prints (`Usage:`) or an operator is not.
        let names_a_program = first
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || "./$~_".contains(c))
            && !first.ends_with(':');
        if !names_a_program {
            return;
        }
        if NOT_PROGRAMS.contains(&name) {
            if self.utilities.len() < MAX_PROGRAMS_NAMED && !self.utilities.contains(first) {
                self.utilities.push(first.clone());
            }
            return;
        }
        // `torchrun … -m package.module`: the module is what runs.
        let module = expanded
            .iter()
            .position(|w| w == "-m")
            .and_then(|at| expanded.get(at + 1));
        let program = match module {
            Some(module) => format!("{first} -m {module}"),
            None => first.clone(),
        };
        let shown: String = if program.chars().count() > MAX_PROGRAM_CHARS {
            let head: String = program.chars().take(MAX_PROGRAM_CHARS).collect();
            format!("{head}…")
        } else {
            program
        };
        if self.programs.len() < MAX_PROGRAMS_NAMED && !self.programs.contains(&shown) {
            self.programs.push(shown);
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
    fn test(&mut self, words: &[String], nesting: usize) -> Option<bool> {
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
                    (bracket_test(&operands, open == "[["), end + 1)
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
                    (bracket_test(&operands, false), end)
                }
                _ => {
                    // A command's exit status: the command runs (`if ! torchrun … train.py;
                    // then`, `if ! run_config "$c"; then`), its status is not known here.
                    let end = words[at..]
                        .iter()
                        .position(|w| w == "&&" || w == "||")
                        .map_or(words.len(), |p| at + p);
                    let command = words.get(at..end).unwrap_or_default();
                    if !command.is_empty() {
                        self.command(command, nesting);
                    }
                    // `true`, `:` and `false` have a known status.
                    let status = match command.first().map(String::as_str) {
                        Some("true" | ":") => Some(true),
                        Some("false") => Some(false),
                        _ => None,
                    };
                    (status, end)
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
