//! Megatron-LM's per-layer pattern strings (`--moe-layer-freq "([0]*3+[1]*58)"`), evaluated
//! without Python: integer list literals, `*` by an integer, `+` and parentheses.

/// Evaluate Megatron-LM's layer-pattern expressions (`"([0]*3+[1]*58)"`, `"[1,0]*4"`):
/// list literals of integers, `*` by an integer, `+` concatenation and parentheses.
pub fn eval_layer_pattern(text: &str) -> Result<Vec<u64>, String> {
    let tokens: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut pos = 0;
    let value = pattern_sum(&tokens, &mut pos)?;
    if pos != tokens.len() {
        return Err(format!(
            "unexpected `{}` in layer pattern `{text}`",
            tokens[pos]
        ));
    }
    match value {
        PatternValue::List(v) => Ok(v),
        PatternValue::Int(_) => Err(format!("layer pattern `{text}` is not a list")),
    }
}

/// Longest pattern accepted (far beyond any real model's depth).
const MAX_PATTERN_LEN: u64 = 100_000;

enum PatternValue {
    Int(u64),
    List(Vec<u64>),
}

fn pattern_sum(t: &[char], pos: &mut usize) -> Result<PatternValue, String> {
    let mut acc = pattern_product(t, pos)?;
    while t.get(*pos) == Some(&'+') {
        *pos += 1;
        let rhs = pattern_product(t, pos)?;
        acc = match (acc, rhs) {
            (PatternValue::List(mut a), PatternValue::List(b)) => {
                if (a.len() + b.len()) as u64 > MAX_PATTERN_LEN {
                    return Err("layer pattern too long".into());
                }
                a.extend(b);
                PatternValue::List(a)
            }
            (PatternValue::Int(a), PatternValue::Int(b)) => PatternValue::Int(
                a.checked_add(b)
                    .ok_or("integer overflow in layer pattern")?,
            ),
            _ => return Err("cannot add a list and an integer in a layer pattern".into()),
        };
    }
    Ok(acc)
}

fn pattern_product(t: &[char], pos: &mut usize) -> Result<PatternValue, String> {
    let mut acc = pattern_atom(t, pos)?;
    while t.get(*pos) == Some(&'*') {
        *pos += 1;
        let rhs = pattern_atom(t, pos)?;
        acc = match (acc, rhs) {
            (PatternValue::List(a), PatternValue::Int(n))
            | (PatternValue::Int(n), PatternValue::List(a)) => {
                if (a.len() as u64).saturating_mul(n) > MAX_PATTERN_LEN {
                    return Err("layer pattern too long".into());
                }
                PatternValue::List(a.repeat(n as usize))
            }
            (PatternValue::Int(a), PatternValue::Int(b)) => PatternValue::Int(
                a.checked_mul(b)
                    .ok_or("integer overflow in layer pattern")?,
            ),
            _ => return Err("cannot multiply two lists in a layer pattern".into()),
        };
    }
    Ok(acc)
}

fn pattern_atom(t: &[char], pos: &mut usize) -> Result<PatternValue, String> {
    match t.get(*pos) {
        Some('(') => {
            *pos += 1;
            let v = pattern_sum(t, pos)?;
            if t.get(*pos) != Some(&')') {
                return Err("missing `)` in layer pattern".into());
            }
            *pos += 1;
            Ok(v)
        }
        Some('[') => {
            *pos += 1;
            let mut items = Vec::new();
            while t.get(*pos) != Some(&']') {
                match pattern_atom(t, pos)? {
                    PatternValue::Int(i) => items.push(i),
                    PatternValue::List(_) => return Err("nested list in layer pattern".into()),
                }
                match t.get(*pos) {
                    Some(',') => *pos += 1,
                    Some(']') => {}
                    _ => return Err("expected `,` or `]` in layer pattern".into()),
                }
            }
            *pos += 1;
            Ok(PatternValue::List(items))
        }
        Some(c) if c.is_ascii_digit() => {
            let start = *pos;
            while t.get(*pos).is_some_and(|c| c.is_ascii_digit()) {
                *pos += 1;
            }
            let digits: String = t[start..*pos].iter().collect();
            digits
                .parse::<u64>()
                .map(PatternValue::Int)
                .map_err(|e| e.to_string())
        }
        Some(c) => Err(format!("unexpected `{c}` in layer pattern")),
        None => Err("layer pattern ends early".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_patterns_evaluate_like_python() {
        assert_eq!(
            eval_layer_pattern("([0]*3+[1]*2)").unwrap(),
            vec![0, 0, 0, 1, 1]
        );
        assert_eq!(eval_layer_pattern("[1,0]*2").unwrap(), vec![1, 0, 1, 0]);
        assert_eq!(
            eval_layer_pattern("([1]*3+[0]*1)*2").unwrap(),
            vec![1, 1, 1, 0, 1, 1, 1, 0]
        );
        assert!(eval_layer_pattern("[1]*").is_err());
        assert!(eval_layer_pattern("[1]*1000000000").is_err());
    }
}
