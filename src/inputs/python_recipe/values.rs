//! Python values as the evaluator sees them: truthiness, numeric literals and string escapes,
//! unary and binary operators, dictionary keys and comparisons.

use super::*;

pub(super) fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}

pub(super) fn parse_int(text: &str) -> Result<i64, String> {
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    let lower = clean.to_ascii_lowercase();
    let parsed = if let Some(hex) = lower.strip_prefix("0x") {
        i64::from_str_radix(hex, 16)
    } else if let Some(oct) = lower.strip_prefix("0o") {
        i64::from_str_radix(oct, 8)
    } else if let Some(bin) = lower.strip_prefix("0b") {
        i64::from_str_radix(bin, 2)
    } else {
        lower.parse::<i64>()
    };
    parsed.map_err(|_| format!("integer `{}` is out of range", snippet(text)))
}

pub(super) fn parse_float(text: &str) -> Result<Number, String> {
    let clean: String = text.chars().filter(|c| *c != '_').collect();
    if clean.ends_with(['j', 'J']) {
        return Err(format!(
            "complex number `{}` is not evaluated",
            snippet(text)
        ));
    }
    clean
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .ok_or_else(|| format!("float `{}` is not a finite number", snippet(text)))
}

pub(super) fn unescape(seq: &str) -> String {
    match seq {
        "\\n" => "\n".into(),
        "\\t" => "\t".into(),
        "\\r" => "\r".into(),
        "\\\\" => "\\".into(),
        "\\'" => "'".into(),
        "\\\"" => "\"".into(),
        "\\0" => "\0".into(),
        other if other.starts_with("\\\n") => String::new(),
        other => other.to_owned(),
    }
}

pub(super) enum Num {
    Int(i64),
    Float(f64),
}

fn as_num(value: &Value) -> Option<Num> {
    match value {
        Value::Bool(b) => Some(Num::Int(i64::from(*b))),
        Value::Number(n) => n
            .as_i64()
            .map(Num::Int)
            .or_else(|| n.as_f64().map(Num::Float)),
        _ => None,
    }
}

fn float_value(f: f64) -> Result<Value, String> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| "the result is not a finite number".to_owned())
}

pub(super) fn unary(op: &str, value: &Value) -> Option<Value> {
    match (op, as_num(value)?) {
        ("-", Num::Int(i)) => i.checked_neg().map(Value::from),
        ("-", Num::Float(f)) => Number::from_f64(-f).map(Value::Number),
        ("+", Num::Int(i)) => Some(Value::from(i)),
        ("+", Num::Float(f)) => Number::from_f64(f).map(Value::Number),
        ("~", Num::Int(i)) => Some(Value::from(!i)),
        _ => None,
    }
}

pub(super) fn binary(op: &str, left: &Value, right: &Value) -> Result<Value, String> {
    match (left, right) {
        (Value::String(a), Value::String(b)) if op == "+" => {
            let len = a.len().saturating_add(b.len());
            if len > MAX_BUILT_LEN {
                return Err("the string would be too long".into());
            }
            return Ok(Value::String(format!("{a}{b}")));
        }
        (Value::Array(a), Value::Array(b)) if op == "+" => {
            if a.len().saturating_add(b.len()) > MAX_BUILT_LEN {
                return Err("the list would be too long".into());
            }
            return Ok(Value::Array(a.iter().chain(b).cloned().collect()));
        }
        (Value::String(_) | Value::Array(_), Value::Number(_))
        | (Value::Number(_), Value::String(_) | Value::Array(_))
            if op == "*" =>
        {
            let (seq, n) = if left.is_number() {
                (right, left)
            } else {
                (left, right)
            };
            let count = n.as_i64().ok_or("repeating by a non-integer")?;
            let count = usize::try_from(count.max(0)).map_err(|_| "repeat count out of range")?;
            return match seq {
                Value::String(s) => {
                    if s.len().saturating_mul(count) > MAX_BUILT_LEN {
                        return Err("the string would be too long".into());
                    }
                    Ok(Value::String(s.repeat(count)))
                }
                Value::Array(a) => {
                    if a.len().saturating_mul(count) > MAX_BUILT_LEN {
                        return Err("the list would be too long".into());
                    }
                    Ok(Value::Array(
                        std::iter::repeat_n(a.iter().cloned(), count)
                            .flatten()
                            .collect(),
                    ))
                }
                _ => Err("not a sequence".into()),
            };
        }
        _ => {}
    }
    let (Some(a), Some(b)) = (as_num(left), as_num(right)) else {
        return Err(format!(
            "`{op}` is only evaluated on numbers, strings and lists"
        ));
    };
    let overflow = || "integer overflow".to_owned();
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => match op {
            "+" => x.checked_add(y).map(Value::from).ok_or_else(overflow),
            "-" => x.checked_sub(y).map(Value::from).ok_or_else(overflow),
            "*" => x.checked_mul(y).map(Value::from).ok_or_else(overflow),
            "//" => floor_div(x, y)
                .map(|(q, _)| Value::from(q))
                .ok_or_else(|| "division by zero or overflow".to_owned()),
            "%" => floor_div(x, y)
                .map(|(_, r)| Value::from(r))
                .ok_or_else(|| "division by zero or overflow".to_owned()),
            "**" if y >= 0 => u32::try_from(y)
                .ok()
                .and_then(|e| x.checked_pow(e))
                .map(Value::from)
                .ok_or_else(overflow),
            "/" if y != 0 => float_value(x as f64 / y as f64),
            "<<" => u32::try_from(y)
                .ok()
                .and_then(|s| x.checked_shl(s))
                .filter(|r| r >> y == x)
                .map(Value::from)
                .ok_or_else(overflow),
            ">>" => u32::try_from(y)
                .ok()
                .map(|s| x.checked_shr(s).unwrap_or(if x < 0 { -1 } else { 0 }))
                .map(Value::from)
                .ok_or_else(overflow),
            "&" => Ok(Value::from(x & y)),
            "|" => Ok(Value::from(x | y)),
            "^" => Ok(Value::from(x ^ y)),
            _ => Err(format!("`{op}` is not evaluated here")),
        },
        (a, b) => {
            let x = match a {
                Num::Int(i) => i as f64,
                Num::Float(f) => f,
            };
            let y = match b {
                Num::Int(i) => i as f64,
                Num::Float(f) => f,
            };
            let r = match op {
                "+" => x + y,
                "-" => x - y,
                "*" => x * y,
                "/" if y != 0.0 => x / y,
                "//" if y != 0.0 => (x / y).floor(),
                "%" if y != 0.0 => x - y * (x / y).floor(),
                "**" => x.powf(y),
                _ => return Err(format!("`{op}` is not evaluated here")),
            };
            float_value(r)
        }
    }
}

/// Python's `//` and `%`: the quotient rounds toward negative infinity, the remainder takes
/// the divisor's sign.
fn floor_div(x: i64, y: i64) -> Option<(i64, i64)> {
    let q = x.checked_div(y)?;
    let r = x.checked_rem(y)?;
    if r != 0 && ((r < 0) != (y < 0)) {
        Some((q.checked_sub(1)?, r.checked_add(y)?))
    } else {
        Some((q, r))
    }
}

/// The key a Python dict holds `value` under, as this reader stores dicts (JSON objects):
/// strings as themselves, numbers and booleans as Python prints them, a tuple of those as its
/// Python repr (`(4, 1)`), so `{(4, 1): x}[(pp, vp)]` finds its entry.
pub(super) fn dict_key(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(if *b { "True" } else { "False" }.to_owned()),
        Value::Null => Some("None".to_owned()),
        Value::Array(items) => {
            let parts: Option<Vec<String>> = items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Some(format!("'{s}'")),
                    Value::Array(_) | Value::Object(_) => None,
                    other => dict_key(other),
                })
                .collect();
            let parts = parts?;
            Some(if parts.len() == 1 {
                format!("({},)", parts.join(""))
            } else {
                format!("({})", parts.join(", "))
            })
        }
        Value::Object(_) => None,
    }
}

pub(super) fn compare(op: &str, left: &Value, right: &Value) -> Option<bool> {
    let numeric = || -> Option<std::cmp::Ordering> {
        let to_f = |v: &Value| match as_num(v)? {
            Num::Int(i) => Some(i as f64),
            Num::Float(f) => Some(f),
        };
        to_f(left)?.partial_cmp(&to_f(right)?)
    };
    let equal = || match (as_num(left), as_num(right)) {
        (Some(_), Some(_)) => numeric() == Some(std::cmp::Ordering::Equal),
        _ => left == right,
    };
    use std::cmp::Ordering::*;
    match op {
        "==" => Some(equal()),
        "!=" => Some(!equal()),
        // `is` is only meaningful here for None, True and False.
        "is" => Some(left == right),
        "is not" => Some(left != right),
        "<" => numeric().map(|o| o == Less),
        "<=" => numeric().map(|o| o != Greater),
        ">" => numeric().map(|o| o == Greater),
        ">=" => numeric().map(|o| o != Less),
        "in" | "not in" => {
            let found = match right {
                Value::Array(items) => items.contains(left),
                Value::String(s) => left.as_str().map(|l| s.contains(l))?,
                Value::Object(map) => map.contains_key(&dict_key(left)?),
                _ => return None,
            };
            Some(if op == "in" { found } else { !found })
        }
        _ => None,
    }
}
