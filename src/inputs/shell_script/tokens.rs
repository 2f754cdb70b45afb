//! A script's statements and a statement's words, as bash splits them (quotes, brackets,
//! comments and continued lines).

pub(super) fn find_char(chars: &[char], from: usize, wanted: char) -> Option<usize> {
    chars
        .iter()
        .skip(from)
        .position(|&c| c == wanted)
        .map(|p| from + p)
}

/// Index of the bracket closing the one at `open_at`, skipping quotes.
pub(super) fn matching(chars: &[char], open_at: usize, open: char, close: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut at = open_at;
    while at < chars.len() {
        let c = chars[at];
        match quote {
            Some(q) if c == q => quote = None,
            Some('"') if c == '\\' => at += 1,
            Some(_) => {}
            None if c == '\\' => at += 1,
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == open => depth += 1,
            None if c == close => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(at);
                }
            }
            None => {}
        }
        at += 1;
    }
    None
}

/// Copies the character at `at`, inside a quote, to `current`: the closing quote ends the
/// quote, and a backslash in double quotes keeps the next character with it. Returns how
/// many characters it took.
fn quoted_char(chars: &[char], at: usize, quote: &mut Option<char>, current: &mut String) -> usize {
    let c = chars[at];
    if Some(c) == *quote {
        *quote = None;
    } else if *quote == Some('"') && c == '\\' {
        if let Some(&next) = chars.get(at + 1) {
            current.push(c);
            current.push(next);
            return 2;
        }
    }
    current.push(c);
    1
}

/// The script's statements: split at newlines and `;` outside quotes and brackets, with
/// continued lines joined, comments dropped and newlines inside `( … )` read as spaces.
pub(super) fn statements(script: &str) -> Vec<String> {
    let chars: Vec<char> = script.chars().collect();
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    let mut at = 0;
    // The delimiter of a here-document the current line opens (`<<'PY'`, `<<-EOF`).
    let mut heredoc: Option<String> = None;
    let end = |current: &mut String, out: &mut Vec<String>| {
        let statement = current.trim();
        if !statement.is_empty() {
            out.push(statement.to_string());
        }
        current.clear();
    };
    while at < chars.len() {
        let c = chars[at];
        match quote {
            Some(_) => {
                at += quoted_char(&chars, at, &mut quote, &mut current);
                continue;
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    current.push(c);
                }
                '\\' => match chars.get(at + 1) {
                    Some('\n') => {
                        current.push(' ');
                        at += 2;
                        continue;
                    }
                    Some(&next) => {
                        current.push(c);
                        current.push(next);
                        at += 2;
                        continue;
                    }
                    None => {}
                },
                '#' if current.is_empty()
                    || current.ends_with(|p: char| p.is_whitespace() || p == '(') =>
                {
                    while at < chars.len() && chars[at] != '\n' {
                        at += 1;
                    }
                    continue;
                }
                '(' | '{' if current.ends_with('$') || c == '(' => {
                    depth += 1;
                    current.push(c);
                }
                ')' => {
                    depth = depth.saturating_sub(1);
                    current.push(c);
                }
                '}' if depth > 0 => {
                    depth -= 1;
                    current.push(c);
                }
                '<' if depth == 0 && heredoc.is_none() => {
                    heredoc = heredoc_delimiter(&chars, at);
                    current.push(c);
                }
                '\n' if depth > 0 => current.push(' '),
                '\n' => {
                    // A here-document fed to Python (or another interpreter) is that
                    // program's source, not shell: its lines are skipped. Any other one
                    // (`sbatch <<EOF`, `cat > run.sh <<EOF`) is read as the script it holds.
                    let interpreted = heredoc.is_some()
                        && split_words(&current).iter().any(|w| is_interpreter(w));
                    end(&mut current, &mut out);
                    if let Some(delimiter) = heredoc.take() {
                        if interpreted {
                            at = skip_heredoc_body(&chars, at + 1, &delimiter);
                            continue;
                        }
                    }
                }
                // `;;` ends a `case` branch: kept as a statement of its own.
                ';' if depth == 0 && chars.get(at + 1) == Some(&';') => {
                    end(&mut current, &mut out);
                    out.push(";;".to_string());
                    at += 2;
                    continue;
                }
                ';' if depth == 0 => end(&mut current, &mut out),
                _ => current.push(c),
            },
        }
        at += 1;
    }
    end(&mut current, &mut out);
    out
}

/// The delimiter of a here-document opened at `at` (`<<EOF`, `<<-EOF`, `<< 'PY'`, `<<"X"`);
/// `None` for a here-string (`<<<`) or anything else.
fn heredoc_delimiter(chars: &[char], at: usize) -> Option<String> {
    if chars.get(at + 1) != Some(&'<') || chars.get(at + 2) == Some(&'<') {
        return None;
    }
    if at > 0 && chars[at - 1] == '<' {
        return None;
    }
    let mut from = at + 2;
    if chars.get(from) == Some(&'-') {
        from += 1;
    }
    while chars.get(from).is_some_and(|c| *c == ' ' || *c == '\t') {
        from += 1;
    }
    let word: String = chars[from.min(chars.len())..]
        .iter()
        .take_while(|c| !c.is_whitespace() && !matches!(c, ';' | '|' | '&' | '>' | '<' | ')'))
        .filter(|c| !matches!(c, '\'' | '"'))
        .collect();
    (!word.is_empty()).then_some(word)
}

/// Whether a word runs an interpreter other than a shell (`python3`, `/usr/bin/python`).
fn is_interpreter(word: &str) -> bool {
    let name = word.rsplit('/').next().unwrap_or(word);
    name.starts_with("python") || matches!(name, "perl" | "ruby" | "node")
}

/// Index just past the line holding only `delimiter` (leading tabs allowed, as `<<-`
/// strips them), starting from the body's first character; the end when it never comes.
fn skip_heredoc_body(chars: &[char], from: usize, delimiter: &str) -> usize {
    let mut line_start = from;
    while line_start < chars.len() {
        let line_end = find_char(chars, line_start, '\n').unwrap_or(chars.len());
        let line: String = chars[line_start..line_end].iter().collect();
        if line.trim() == delimiter {
            return (line_end + 1).min(chars.len());
        }
        line_start = line_end + 1;
    }
    chars.len()
}

/// A statement's words as written (quotes kept), split at whitespace outside quotes and
/// brackets.
pub(super) fn split_words(statement: &str) -> Vec<String> {
    let chars: Vec<char> = statement.chars().collect();
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        match quote {
            Some(_) => {
                at += quoted_char(&chars, at, &mut quote, &mut current);
                continue;
            }
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    current.push(c);
                }
                '\\' => {
                    current.push(c);
                    if let Some(&next) = chars.get(at + 1) {
                        current.push(next);
                        at += 1;
                    }
                }
                '(' | '{' if c == '(' || current.ends_with('$') => {
                    depth += 1;
                    current.push(c);
                }
                ')' | '}' if depth > 0 => {
                    depth -= 1;
                    current.push(c);
                }
                c if c.is_whitespace() && depth == 0 => {
                    if !current.is_empty() {
                        words.push(std::mem::take(&mut current));
                    }
                }
                _ => current.push(c),
            },
        }
        at += 1;
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}
