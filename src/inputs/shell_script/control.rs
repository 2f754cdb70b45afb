//! Compound commands: `case`, `for` and `while`/`until` loops (with `break` and `continue`),
//! and `&&` / `||` lists.
//!
//! A list's commands are taken to succeed (`mkdir -p "$DIR" && cd "$DIR" && torchrun …` runs
//! torchrun; `cmd || exit 1` does not exit); `true`, `false` and tests have the status they
//! compute, and a test on the machine (a file, an unset variable) counts as false, as in `if`.

use super::syntax::{glob_matches, holds_flag, pattern_end};
use super::{IgnoredSetting, Shell, Var};

/// `break` or `continue` met in a loop body, not yet handled by its loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum LoopControl {
    Break,
    Continue,
}

/// Whether a word separates the commands of an `&&` / `||` list (as written, unquoted).
fn is_list_operator(word: &str) -> bool {
    word == "&&" || word == "||"
}

impl Shell {
    /// A statement that may be an `&&` / `||` list: its commands run as bash would run them.
    pub(super) fn and_or_list(&mut self, words: &[String], nesting: usize) {
        match words.iter().position(|w| is_list_operator(w)) {
            None => self.command(words, nesting),
            Some(end) => {
                let status = self.list_element(&words[..end], nesting);
                self.list_tail(words, end, status, nesting);
            }
        }
    }

    /// The rest of the list `words` from the operator at `at` on, after a command with
    /// `status` (`fi && …` continues a list whose first command is the `if` block).
    pub(super) fn list_tail(
        &mut self,
        words: &[String],
        mut at: usize,
        mut status: Option<bool>,
        nesting: usize,
    ) {
        while let Some(op) = words.get(at) {
            if !is_list_operator(op) {
                return;
            }
            let start = at + 1;
            let end = words[start..]
                .iter()
                .position(|w| is_list_operator(w))
                .map_or(words.len(), |p| start + p);
            let element = &words[start..end];
            // An unknown status counts as failure, as an unknown `if` test counts as false.
            let runs = if op == "&&" {
                status.unwrap_or(false)
            } else {
                !status.unwrap_or(false)
            };
            if runs {
                status = self.list_element(element, nesting);
            } else if status.is_none() && holds_flag(&element.join(" ")) {
                self.notes.push(IgnoredSetting::unread(
                    words[..end].join(" "),
                    "a test on the machine running the script (a file, a command); taken as \
                     false, so the flags it guards were not read",
                ));
            }
            at = end;
        }
    }

    /// Runs one command of a list and gives its exit status: computed for tests, `true` and
    /// `false`, assumed success for other commands, unknown for what depends on the machine.
    fn list_element(&mut self, words: &[String], nesting: usize) -> Option<bool> {
        match words.first().map(String::as_str) {
            None => Some(true),
            Some("[" | "[[" | "test" | "!" | "true" | "false" | ":") => self.test(words, nesting),
            Some(_) => {
                self.command(words, nesting);
                Some(true)
            }
        }
    }

    /// `case WORD in PATTERN) … ;; … esac`: the first branch whose pattern (`*`, `?`, `a|b`)
    /// matches runs.
    pub(super) fn case(&mut self, words: &[String], body: &[String], nesting: usize) {
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
    pub(super) fn for_loop(&mut self, words: &[String], body: &[String], nesting: usize) {
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
            if !self.loop_body(body, nesting) {
                return;
            }
        }
    }

    /// `while TEST; do … done` (`until`: while the test fails): the body runs while the test
    /// holds, within the loop budget. A test this evaluation cannot decide (`read line` from
    /// a file, a command's status) runs nothing, and is noted when the body holds flags; with
    /// no script arguments, an argument-parsing loop (`while [[ $# -gt 0 ]]`) runs nothing.
    pub(super) fn while_loop(
        &mut self,
        statement: &str,
        words: &[String],
        body: &[String],
        nesting: usize,
    ) {
        let until = words[0] == "until";
        let test = match words[1..].last() {
            Some(last) if last == "do" => &words[1..words.len() - 1],
            _ => &words[1..],
        };
        let mut runs = 0usize;
        loop {
            if self.stopped {
                return;
            }
            let holds = match self.test(test, nesting) {
                Some(value) => value != until,
                None => {
                    if runs == 0 && holds_flag(&body.join("\n")) {
                        self.notes.push(IgnoredSetting::unread(
                            statement.to_string(),
                            "a loop on something the script reads at run time (a file, a \
                             command's status); not run, so the flags it would add were not \
                             read",
                        ));
                    }
                    return;
                }
            };
            if !holds {
                return;
            }
            if self.loop_budget == 0 {
                self.notes.push(IgnoredSetting::new(
                    statement.to_string(),
                    format!(
                        "a loop stopped after {runs} runs with its test still true: the \
                         evaluation's loop budget ran out"
                    ),
                ));
                return;
            }
            self.loop_budget -= 1;
            runs += 1;
            if !self.loop_body(body, nesting) {
                return;
            }
        }
    }

    /// Runs a loop body once; false after a `break`. An `if` block the body left open
    /// (`break` inside it) is closed.
    fn loop_body(&mut self, body: &[String], nesting: usize) -> bool {
        let open_ifs = self.ifs.len();
        self.loop_depth += 1;
        self.run(body, nesting);
        self.loop_depth -= 1;
        self.ifs.truncate(open_ifs);
        self.loop_control.take() != Some(LoopControl::Break)
    }
}
