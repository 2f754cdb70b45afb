//! A small SVG writer: the few elements the charts draw, with every text and attribute value
//! escaped. Text is `<text>` in a generic font family, so nothing needs fonts to write it;
//! widths are estimated from character counts, which is enough to place labels.

use std::fmt::Write;

/// The font family of every label: the viewer's own sans-serif face.
pub const FONT_FAMILY: &str = "sans-serif";

/// Average advance of a sans-serif character, as a fraction of the font size (wide enough
/// for digits and lower-case text in common sans-serif faces, so estimates err on the safe side).
const CHAR_WIDTH: f64 = 0.6;

/// Estimated width of `text` at `size` px.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * CHAR_WIDTH
}

/// `text` safe inside an XML text node or a double-quoted attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters even escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Text anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn as_str(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// How a label looks.
#[derive(Debug, Clone, Copy)]
pub struct TextStyle {
    pub size: f64,
    pub anchor: Anchor,
    pub bold: bool,
    pub fill: &'static str,
    /// A white outline under the glyphs, so the label reads over lines and bars.
    pub halo: bool,
}

impl TextStyle {
    pub const fn new(size: f64, anchor: Anchor) -> TextStyle {
        TextStyle {
            size,
            anchor,
            bold: false,
            fill: "#222222",
            halo: false,
        }
    }
    pub const fn bold(mut self) -> TextStyle {
        self.bold = true;
        self
    }
    pub const fn fill(mut self, fill: &'static str) -> TextStyle {
        self.fill = fill;
        self
    }
    pub const fn halo(mut self) -> TextStyle {
        self.halo = true;
        self
    }
}

/// One SVG document being written.
pub struct Svg {
    width: f64,
    height: f64,
    body: String,
}

impl Svg {
    pub fn new(width: f64, height: f64) -> Svg {
        Svg {
            width,
            height,
            body: String::new(),
        }
    }

    /// A chart's title and its wrapped subtitle lines, top left (every chart starts so).
    pub fn title(&mut self, heading: &str, subtitle: &[String]) {
        self.text(
            20.0,
            28.0,
            heading,
            TextStyle::new(16.0, Anchor::Start).bold(),
        );
        for (i, line) in subtitle.iter().enumerate() {
            self.text(
                20.0,
                48.0 + i as f64 * 16.0,
                line,
                TextStyle::new(12.0, Anchor::Start).fill("#444444"),
            );
        }
    }

    /// A filled rectangle; `data` becomes `data-*` attributes (the numbers behind the shape,
    /// for tests and scripts), `tooltip` a `<title>` child that viewers show on hover.
    pub fn rect(&mut self, rect: Rect, fill: &str, data: &[(&str, String)], tooltip: &str) {
        let _ = write!(
            self.body,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}""#,
            rect.x,
            rect.y,
            rect.w.max(0.0),
            rect.h.max(0.0),
            escape(fill)
        );
        for (key, value) in data {
            let _ = write!(self.body, r#" data-{}="{}""#, key, escape(value));
        }
        if tooltip.is_empty() {
            self.body.push_str("/>\n");
        } else {
            let _ = writeln!(self.body, "><title>{}</title></rect>", escape(tooltip));
        }
    }

    /// A straight line; `dash` like "6 4" or empty for solid.
    pub fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str, width: f64, dash: &str) {
        let _ = write!(
            self.body,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="{width}""#,
            from.0,
            from.1,
            to.0,
            to.1,
            escape(stroke)
        );
        if !dash.is_empty() {
            let _ = write!(self.body, r#" stroke-dasharray="{}""#, escape(dash));
        }
        self.body.push_str("/>\n");
    }

    pub fn text(&mut self, x: f64, y: f64, text: &str, style: TextStyle) {
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{}" text-anchor="{}" fill="{}"{}{}>{}</text>"#,
            style.size,
            style.anchor.as_str(),
            style.fill,
            if style.bold {
                r#" font-weight="bold""#
            } else {
                ""
            },
            if style.halo {
                r##" stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke""##
            } else {
                ""
            },
            escape(text)
        );
    }

    /// Text turned 90° counter-clockwise around its anchor (a vertical axis title).
    pub fn vertical_text(&mut self, x: f64, y: f64, text: &str, style: TextStyle) {
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{}" text-anchor="{}" fill="{}" transform="rotate(-90 {x:.1} {y:.1})">{}</text>"#,
            style.size,
            style.anchor.as_str(),
            style.fill,
            escape(text)
        );
    }

    /// The finished document: `kind` names the chart (`data-chart`), `title` is its
    /// accessible name.
    pub fn finish(self, kind: &str, title: &str) -> String {
        format!(
            concat!(
                r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" "#,
                r#"font-family="{font}" role="img" data-chart="{kind}">"#,
                "\n<title>{title}</title>\n",
                r##"<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>"##,
                "\n{body}</svg>\n"
            ),
            w = self.width.ceil(),
            h = self.height.ceil(),
            font = FONT_FAMILY,
            kind = escape(kind),
            title = escape(title),
            body = self.body
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

/// Round axis ticks from 0 to at least `max`: steps of 1, 2, 2.5 or 5 times a power of ten,
/// about `target` of them.
pub fn ticks(max: f64, target: usize) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let raw = max / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let count = (max / step).ceil() as usize;
    (0..=count).map(|i| i as f64 * step).collect()
}

/// Symmetric ticks covering `min..=max` (which may be negative), through 0.
pub fn ticks_span(min: f64, max: f64, target: usize) -> Vec<f64> {
    let span = (max.max(0.0) - min.min(0.0)).max(f64::MIN_POSITIVE);
    let step = ticks(span, target).get(1).copied().unwrap_or(1.0);
    let first = (min.min(0.0) / step).floor() as i64;
    let last = (max.max(0.0) / step).ceil() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// A tick value as a label: no trailing zeros.
pub fn tick_label(value: f64) -> String {
    let text = format!("{value:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.into()
    }
}

/// Split `text` into lines no wider than `width` px at `size`, at spaces.
pub fn wrap(text: &str, width: f64, size: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        let candidate = if current.is_empty() {
            word.to_string()
        } else {
            format!("{current} {word}")
        };
        if text_width(&candidate, size) > width && !current.is_empty() {
            lines.push(std::mem::take(&mut current));
            current = word.to_string();
        } else {
            current = candidate;
        }
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_in_text_and_attributes() {
        assert_eq!(escape(r#"a<b & "c"'"#), "a&lt;b &amp; &quot;c&quot;&apos;");
        assert_eq!(escape("x\u{1}y"), "x y");
    }

    #[test]
    fn ticks_cover_the_maximum_with_round_steps() {
        let t = ticks(79.6, 5);
        assert_eq!(t.first(), Some(&0.0));
        assert!(*t.last().unwrap_or(&0.0) >= 79.6, "{t:?}");
        assert_eq!(t[1], 20.0);
        let s = ticks_span(-84.2, 94.6, 6);
        assert!(s.contains(&0.0) && s[0] <= -84.2 && *s.last().unwrap_or(&0.0) >= 94.6);
    }

    #[test]
    fn wrap_keeps_lines_within_width() {
        let lines = wrap("one two three four five six seven", 60.0, 10.0);
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| text_width(l, 10.0) <= 60.0));
    }
}
