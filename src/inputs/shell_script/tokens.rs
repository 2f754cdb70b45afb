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
                '\n' if depth > 0 => current.push(' '),
                '\n' => end(&mut current, &mut out),
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
