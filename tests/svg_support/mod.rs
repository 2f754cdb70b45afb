//! A small test-only reader of the SVG the charts write: every element's tag and attributes,
//! and a check that tags nest and close (no XML crate in the dependency tree).
#![allow(dead_code)]

use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct Element {
    pub tag: String,
    pub attributes: BTreeMap<String, String>,
}

impl Element {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
    pub fn number(&self, key: &str) -> f64 {
        self.get(key)
            .unwrap_or_else(|| panic!("<{}> without {key}: {self:?}", self.tag))
            .parse()
            .unwrap_or_else(|e| panic!("{key} of {self:?}: {e}"))
    }
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// Every start tag in `svg`, in document order; panics unless every tag is closed in order.
pub fn elements(svg: &str) -> Vec<Element> {
    let mut found = Vec::new();
    let mut open: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find('<') {
        let after = &rest[start + 1..];
        let end = after.find('>').expect("unclosed tag");
        let inner = &after[..end];
        rest = &after[end + 1..];
        if inner.starts_with('!') || inner.starts_with('?') {
            continue;
        }
        if let Some(name) = inner.strip_prefix('/') {
            let expected = open
                .pop()
                .unwrap_or_else(|| panic!("</{name}> closes nothing"));
            assert_eq!(expected, name.trim(), "tags cross");
            continue;
        }
        let self_closing = inner.ends_with('/');
        let inner = inner.trim_end_matches('/');
        let (tag, mut attrs) = inner.split_once(char::is_whitespace).unwrap_or((inner, ""));
        let mut attributes = BTreeMap::new();
        while let Some(eq) = attrs.find("=\"") {
            let key = attrs[..eq].trim().to_string();
            let value_start = eq + 2;
            let value_end = attrs[value_start..]
                .find('"')
                .expect("unterminated attribute")
                + value_start;
            let value = &attrs[value_start..value_end];
            assert!(!value.contains('<'), "raw < in attribute {key}");
            assert!(
                attributes.insert(key.clone(), unescape(value)).is_none(),
                "duplicate {key}"
            );
            attrs = &attrs[value_end + 1..];
        }
        assert!(
            attrs.trim().is_empty(),
            "unparsed attribute text {attrs:?} in <{tag}>"
        );
        if !self_closing {
            open.push(tag.to_string());
        }
        found.push(Element {
            tag: tag.to_string(),
            attributes,
        });
    }
    assert!(open.is_empty(), "unclosed elements: {open:?}");
    found
}

/// The elements with `data-role="role"`.
pub fn with_role(svg: &str, role: &str) -> Vec<Element> {
    elements(svg)
        .into_iter()
        .filter(|e| e.get("data-role") == Some(role))
        .collect()
}

/// The text of every `<text>` element, unescaped.
pub fn texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text ") {
        let after = &rest[start..];
        let open_end = after.find('>').expect("text tag") + 1;
        let close = after.find("</text>").expect("closed text");
        out.push(unescape(&after[open_end..close]));
        rest = &after[close..];
    }
    out
}
