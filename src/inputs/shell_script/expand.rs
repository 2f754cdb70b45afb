//! Word expansion as bash does it: parameters (`$A`, `${A:-default}`, `"${A[@]}"`),
//! arithmetic (`$(( … ))`) and word splitting. Command substitution (`$( … )`) and
//! unset variables stay as written, so the reader downstream can name them.

use super::tokens::{find_char, matching, split_words};
use super::{Shell, Var};

/// Deepest nesting of `${…}` defaults and of parentheses in `$(( … ))` followed.
const MAX_EXPANSION_DEPTH: usize = 32;

impl Shell {
    /// `word` as bash expands it in a command: quoted parts stay one word, unquoted
    /// expansions split on whitespace, `"${A[@]}"` gives one word per element.
    pub(super) fn expand(&mut self, word: &str) -> Vec<String> {
        let mut out = Fields::default();
        let chars: Vec<char> = word.chars().collect();
        let mut at = 0;
        let mut quoted = false;
        while at < chars.len() {
            let c = chars[at];
            match c {
                '\'' if !quoted => {
                    let end = find_char(&chars, at + 1, '\'').unwrap_or(chars.len());
                    out.literal(
                        &chars[at + 1..end.min(chars.len())]
                            .iter()
                            .collect::<String>(),
                    );
                    out.touch();
                    at = end + 1;
                }
                '"' => {
                    quoted = !quoted;
                    out.touch();
                    at += 1;
                }
                // A backslash-newline continues the line, in quotes too.
                '\\' if chars.get(at + 1) == Some(&'\n') => at += 2,
                '\\' => {
                    if let Some(&next) = chars.get(at + 1) {
                        if quoted && !matches!(next, '$' | '"' | '\\' | '`') {
                            out.literal("\\");
                        }
                        out.literal(&next.to_string());
                    }
                    at += 2;
                }
                '$' => {
                    let (value, next) = self.expansion(&chars, at);
                    match value {
                        Expanded::Text(text) if quoted => {
                            out.literal(&text);
                            out.touch();
                        }
                        Expanded::Text(text) => out.split(&text),
                        Expanded::Words(items) if quoted => out.words(items),
                        Expanded::Words(items) => out.split(&items.join(" ")),
                        Expanded::Unexpanded(text) => out.literal(&text),
                    }
                    at = next;
                }
                _ => {
                    out.literal(&c.to_string());
                    at += 1;
                }
            }
        }
        out.finish()
    }

    /// The expansion starting at `chars[at] == '$'` and the index after it.
    fn expansion(&mut self, chars: &[char], at: usize) -> (Expanded, usize) {
        let next_is = |offset: usize, c: char| chars.get(at + offset) == Some(&c);
        let rest = || chars[at..].iter().collect::<String>();
        if next_is(1, '(') && next_is(2, '(') {
            if let Some(end) = matching(chars, at + 1, '(', ')') {
                let text: String = chars[at..=end].iter().collect();
                let inner: String = chars[at + 3..end.saturating_sub(1)].iter().collect();
                let value = match self.arithmetic(&inner) {
                    Some(v) => Expanded::Text(v.to_string()),
                    None => Expanded::Unexpanded(text),
                };
                return (value, end + 1);
            }
        }
        // An unclosed `$(` or `${` runs to the end of the word, kept as written.
        if next_is(1, '(') {
            return match matching(chars, at + 1, '(', ')') {
                Some(end) => {
                    let inner: String = chars[at + 2..end].iter().collect();
                    let value = match self.echo_substitution(&inner) {
                        Some(text) => Expanded::Text(text),
                        None => Expanded::Unexpanded(chars[at..=end].iter().collect()),
                    };
                    (value, end + 1)
                }
                None => (Expanded::Unexpanded(rest()), chars.len()),
            };
        }
        if next_is(1, '{') {
            return match matching(chars, at + 1, '{', '}') {
                Some(end) => {
                    let inner: String = chars[at + 2..end].iter().collect();
                    let text: String = chars[at..=end].iter().collect();
                    (self.braced(&inner, text), end + 1)
                }
                None => (Expanded::Unexpanded(rest()), chars.len()),
            };
        }
        let name: String = match chars.get(at + 1) {
            Some(c) if c.is_ascii_digit() || matches!(c, '#' | '@' | '*' | '?' | '$' | '!') => {
                c.to_string()
            }
            _ => chars[at + 1..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .collect(),
        };
        if name.is_empty() {
            return (Expanded::Text("$".to_string()), at + 1);
        }
        let next = at + 1 + name.chars().count();
        let text = format!("${name}");
        (
            self.lookup(&name, None)
                .unwrap_or(Expanded::Unexpanded(text)),
            next,
        )
    }

    /// The one kind of command substitution computed here: `$(echo WORDS | tr '\n' ' ' |
    /// sed 's/  */ /g')`, an echo whose output only has its blanks squeezed (how scripts
    /// flatten a multi-line argument string). Anything else is `None`.
    fn echo_substitution(&mut self, inner: &str) -> Option<String> {
        let words = split_words(inner);
        let mut stages = words.split(|w| w == "|");
        let echo = stages.next()?;
        if echo.first().map(String::as_str) != Some("echo") {
            return None;
        }
        let args: Vec<&String> = echo[1..].iter().filter(|w| *w != "-n").collect();
        if args.iter().any(|w| w.starts_with('-')) {
            return None;
        }
        for stage in stages {
            if !squeezes_blanks(stage) {
                return None;
            }
        }
        let text: Vec<String> = args.iter().flat_map(|w| self.expand(w)).collect();
        Some(
            text.join(" ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        )
    }

    /// `${…}` forms: `NAME`, `NAME[@]`, `NAME[i]`, `#NAME[@]`, `NAME:-word`, `NAME-word`,
    /// `NAME:=word`, `NAME:+word`. Anything else stays as written.
    fn braced(&mut self, inner: &str, text: String) -> Expanded {
        // `${A:-${B:-…}}` nests expansions; past this depth the text stays as written.
        if self.expansion_depth >= MAX_EXPANSION_DEPTH {
            return Expanded::Unexpanded(text);
        }
        self.expansion_depth += 1;
        let value = self.braced_at_depth(inner, text);
        self.expansion_depth -= 1;
        value
    }

    fn braced_at_depth(&mut self, inner: &str, text: String) -> Expanded {
        if let Some(name) = inner.strip_prefix('#') {
            let name = name.trim_end_matches("[@]").trim_end_matches("[*]");
            return match self.vars.get(name) {
                Some(Var::Array(items)) => Expanded::Text(items.len().to_string()),
                Some(Var::Scalar(s)) => Expanded::Text(s.chars().count().to_string()),
                None => Expanded::Text("0".to_string()),
            };
        }
        let name_end = inner
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(inner.len());
        let (name, rest) = inner.split_at(name_end);
        if name.is_empty() {
            return Expanded::Unexpanded(text);
        }
        if let Some(index) = rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            return self
                .lookup(name, Some(index))
                .unwrap_or(Expanded::Unexpanded(text));
        }
        let value = self.lookup(name, None);
        let set_and_nonempty = matches!(&value, Some(Expanded::Text(t)) if !t.is_empty())
            || matches!(&value, Some(Expanded::Words(w)) if !w.is_empty());
        let default_of = |op: &str| rest.strip_prefix(op);
        if rest.is_empty() {
            return value.unwrap_or(Expanded::Unexpanded(text));
        }
        for (op, needs_nonempty, assign) in
            [(":-", true, false), (":=", true, true), ("-", false, false)]
        {
            if let Some(default) = default_of(op) {
                let use_default = if needs_nonempty {
                    !set_and_nonempty
                } else {
                    value.is_none()
                };
                if !use_default {
                    return value.unwrap_or(Expanded::Text(String::new()));
                }
                let default = self.expand(default).join(" ");
                // Upper-case names are the environment the script reads (`TP=${TP:-1}`);
                // positional parameters and locals are the script's own business.
                if name.chars().any(|c| c.is_ascii_uppercase()) {
                    let shown = format!("{name}={default}");
                    if !self.defaults.contains(&shown) {
                        self.defaults.push(shown);
                    }
                }
                if assign {
                    self.vars
                        .insert(name.to_string(), Var::Scalar(default.clone()));
                }
                return Expanded::Text(default);
            }
        }
        if let Some(alternative) = default_of(":+") {
            return if set_and_nonempty {
                Expanded::Text(self.expand(alternative).join(" "))
            } else {
                Expanded::Text(String::new())
            };
        }
        Expanded::Unexpanded(text)
    }

    /// A variable's value: `None` when unset. Positional parameters are a called function's
    /// arguments; the script itself runs with none, and a missing one stays as written.
    pub(super) fn lookup(&self, name: &str, index: Option<&str>) -> Option<Expanded> {
        match name {
            "#" => return Some(Expanded::Text(self.positional.len().to_string())),
            "@" | "*" => return Some(Expanded::Words(self.positional.clone())),
            _ if name.chars().all(|c| c.is_ascii_digit()) && name != "0" => {
                let at = name.parse::<usize>().ok()?.checked_sub(1)?;
                return self.positional.get(at).cloned().map(Expanded::Text);
            }
            "?" => return Some(Expanded::Text("0".to_string())),
            // Unset, IFS splits on blanks.
            "IFS" if !self.vars.contains_key("IFS") => {
                return Some(Expanded::Text(" \t\n".to_string()))
            }
            _ => {}
        }
        let var = self.vars.get(name)?;
        Some(match (var, index) {
            (Var::Array(items), Some("@" | "*")) => Expanded::Words(items.clone()),
            (Var::Array(items), Some(i)) => Expanded::Text(
                i.parse::<usize>()
                    .ok()
                    .and_then(|i| items.get(i))
                    .cloned()?,
            ),
            (Var::Array(items), None) => Expanded::Text(items.first().cloned().unwrap_or_default()),
            (Var::Scalar(s), Some("@" | "*" | "0")) | (Var::Scalar(s), None) => {
                Expanded::Text(s.clone())
            }
            (Var::Scalar(_), Some(_)) => return None,
        })
    }

    /// Integer arithmetic of `$(( … ))`: + - * / % and parentheses over numbers and
    /// variables. `None` where a variable is unset or not a number.
    pub(super) fn arithmetic(&mut self, text: &str) -> Option<i64> {
        let mut tokens = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        let mut at = 0;
        while at < chars.len() {
            let c = chars[at];
            if c.is_whitespace() {
                at += 1;
            } else if c.is_ascii_digit() {
                let digits: String = chars[at..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                at += digits.len();
                tokens.push(Token::Number(digits.parse().ok()?));
            } else if c == '$' || c.is_ascii_alphabetic() || c == '_' {
                let (value, next) = if c == '$' {
                    let (value, next) = self.expansion(&chars, at);
                    match value {
                        Expanded::Text(t) => (t, next),
                        Expanded::Words(w) => (w.join(" "), next),
                        Expanded::Unexpanded(_) => return None,
                    }
                } else {
                    let name: String = chars[at..]
                        .iter()
                        .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                        .collect();
                    let next = at + name.len();
                    match self.vars.get(&name) {
                        Some(Var::Scalar(s)) => (s.clone(), next),
                        _ => return None,
                    }
                };
                tokens.push(Token::Number(value.trim().parse().ok()?));
                at = next;
            } else if "+-*/%()".contains(c) {
                tokens.push(Token::Op(c));
                at += 1;
            } else {
                return None;
            }
        }
        let mut parser = Arithmetic {
            tokens,
            at: 0,
            depth: 0,
        };
        let value = parser.sum()?;
        (parser.at == parser.tokens.len()).then_some(value)
    }
}

#[derive(Debug)]
pub(super) enum Expanded {
    Text(String),
    Words(Vec<String>),
    /// What could not be expanded (an unset variable, a command substitution), kept as
    /// written and never split, so the reader downstream sees and names it whole.
    Unexpanded(String),
}

/// Words being built by an expansion: `current` exists once anything (even an empty quoted
/// string) was written to it.
#[derive(Debug, Default)]
struct Fields {
    done: Vec<String>,
    current: Option<String>,
    /// The current word is only quotes around an empty `"$@"` / `"${A[@]}"`: bash gives no
    /// word for it at all (not an empty one).
    vanishes: bool,
}

impl Fields {
    fn literal(&mut self, text: &str) {
        self.current.get_or_insert_with(String::new).push_str(text);
        self.vanishes &= text.is_empty();
    }
    fn touch(&mut self) {
        self.current.get_or_insert_with(String::new);
    }
    /// Unquoted expansion: split on whitespace, the first piece joining the current word.
    fn split(&mut self, text: &str) {
        let starts_blank = text.starts_with(char::is_whitespace);
        let ends_blank = text.ends_with(char::is_whitespace);
        let mut pieces = text.split_whitespace().peekable();
        if pieces.peek().is_none() {
            if !text.is_empty() {
                self.end_word();
            }
            return;
        }
        if starts_blank {
            self.end_word();
        }
        let mut first = true;
        for piece in pieces {
            if !first {
                self.end_word();
            }
            self.literal(piece);
            first = false;
        }
        if ends_blank {
            self.end_word();
        }
    }
    /// `"${A[@]}"`: one word per element, the first joining the current word.
    fn words(&mut self, items: Vec<String>) {
        if items.is_empty() && self.current.as_deref().is_none_or(str::is_empty) {
            self.vanishes = true;
        }
        let mut first = true;
        for item in items {
            if !first {
                self.end_word();
            }
            self.literal(&item);
            first = false;
        }
    }
    fn end_word(&mut self) {
        if let Some(word) = self.current.take() {
            if !(self.vanishes && word.is_empty()) {
                self.done.push(word);
            }
        }
        self.vanishes = false;
    }
    fn finish(mut self) -> Vec<String> {
        self.end_word();
        self.done
    }
}

#[derive(Debug, Clone, Copy)]
enum Token {
    Number(i64),
    Op(char),
}

struct Arithmetic {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Arithmetic {
    fn peek_op(&self) -> Option<char> {
        match self.tokens.get(self.at) {
            Some(Token::Op(c)) => Some(*c),
            _ => None,
        }
    }
    fn sum(&mut self) -> Option<i64> {
        let mut value = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek_op() {
            self.at += 1;
            let rhs = self.product()?;
            value = if op == '+' {
                value.checked_add(rhs)?
            } else {
                value.checked_sub(rhs)?
            };
        }
        Some(value)
    }
    fn product(&mut self) -> Option<i64> {
        let mut value = self.atom()?;
        while let Some(op @ ('*' | '/' | '%')) = self.peek_op() {
            self.at += 1;
            let rhs = self.atom()?;
            value = match op {
                '*' => value.checked_mul(rhs)?,
                '/' => value.checked_div(rhs)?,
                _ => value.checked_rem(rhs)?,
            };
        }
        Some(value)
    }
    fn atom(&mut self) -> Option<i64> {
        let token = *self.tokens.get(self.at)?;
        self.at += 1;
        match token {
            Token::Number(n) => Some(n),
            Token::Op('-') if self.depth < MAX_EXPANSION_DEPTH => {
                self.depth += 1;
                let value = self.atom();
                self.depth -= 1;
                value?.checked_neg()
            }
            Token::Op('(') => {
                if self.depth >= MAX_EXPANSION_DEPTH {
                    return None;
                }
                self.depth += 1;
                let value = self.sum();
                self.depth -= 1;
                let value = value?;
                match self.tokens.get(self.at) {
                    Some(Token::Op(')')) => {
                        self.at += 1;
                        Some(value)
                    }
                    _ => None,
                }
            }
            Token::Op(_) => None,
        }
    }
}

/// A pipeline stage that only turns blanks into blanks: `tr '\n' ' '`, `tr -s ' '`,
/// `sed 's/  */ /g'` (or `\+`, `[[:space:]]`, `\s` patterns). Quotes as written.
fn squeezes_blanks(stage: &[String]) -> bool {
    let unquote = |w: &String| w.trim_matches(|c| c == '\'' || c == '"').to_string();
    let blank = |text: &str| {
        !text.is_empty()
            && text
                .replace("\\n", " ")
                .replace("\\t", " ")
                .chars()
                .all(|c| c == ' ' || c == '\t')
    };
    match stage.first().map(String::as_str) {
        Some("tr") => {
            let sets: Vec<String> = stage[1..]
                .iter()
                .filter(|w| *w != "-s")
                .map(unquote)
                .collect();
            !sets.is_empty() && sets.len() <= 2 && sets.iter().all(|s| blank(s))
        }
        Some("sed") => {
            let scripts: Vec<String> = stage[1..]
                .iter()
                .filter(|w| *w != "-e")
                .map(unquote)
                .collect();
            let [script] = scripts.as_slice() else {
                return false;
            };
            let Some(body) = script.strip_prefix("s/").and_then(|b| b.strip_suffix("/g")) else {
                return false;
            };
            let Some((pattern, replacement)) = body.split_once('/') else {
                return false;
            };
            let pattern = pattern
                .replace("[[:space:]]", " ")
                .replace("\\s", " ")
                .replace("\\+", "")
                .replace(['*', '+'], "");
            replacement == " " && blank(&pattern)
        }
        _ => false,
    }
}
