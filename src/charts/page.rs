//! What the CLI writes: several charts as one SVG (stacked top to bottom), and one
//! self-contained HTML page with the Markdown rationale, the charts inline and the inputs.

use pulldown_cmark::{html, CowStr, Event, Options, Parser, Tag};

use super::svg::escape;
use super::Chart;

/// Space between stacked charts, px.
const GAP: f64 = 16.0;

/// Said where an answer has nothing to draw.
pub const NO_CHART: &str =
    "No chart: the layout breaks a rule (or no layout fits), so there is no memory or time to draw; the text answer says why.";

/// The charts as one SVG document, each placed below the previous one; with none, a short
/// document that says so (a file the caller asked for is always written).
pub fn stacked_svg(charts: &[Chart]) -> String {
    if charts.is_empty() {
        return format!(
            concat!(
                r#"<svg xmlns="http://www.w3.org/2000/svg" width="860" height="40" viewBox="0 0 860 40" font-family="sans-serif">"#,
                "\n<title>No chart</title>\n",
                r##"<text x="20" y="25" font-size="13" fill="#444444">{}</text>"##,
                "\n</svg>\n"
            ),
            escape(NO_CHART)
        );
    }
    let width = charts.iter().map(|c| c.width).fold(0.0, f64::max).ceil();
    let mut body = String::new();
    let mut y = 0.0;
    for chart in charts {
        // A nested <svg> keeps each chart's own coordinate system; only its offset changes.
        let placed = chart
            .svg
            .replacen("<svg ", &format!(r#"<svg x="0" y="{y:.0}" "#), 1);
        body.push_str(&placed);
        y += chart.height.ceil() + GAP;
    }
    let height = (y - GAP).max(0.0);
    format!(
        concat!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#,
            "\n<title>{title}</title>\n{body}</svg>\n"
        ),
        w = width,
        h = height,
        title = escape(
            &charts
                .iter()
                .map(|c| c.title.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
        body = body
    )
}

/// Markdown as HTML. Raw HTML in the Markdown is shown as text, not passed through, and links
/// and images keep only web and relative addresses: the rationale quotes user input (setting
/// names, file text, a commit's diff), which must not become markup or script.
pub fn markdown_html(markdown: &str) -> String {
    let events = Parser::new_ext(
        markdown,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH,
    )
    .map(|event| match event {
        Event::Html(text) | Event::InlineHtml(text) => Event::Text(text),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Link {
            link_type,
            dest_url: safe_url(dest_url),
            title,
            id,
        }),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Image {
            link_type,
            dest_url: safe_url(dest_url),
            title,
            id,
        }),
        other => other,
    });
    let mut out = String::new();
    html::push_html(&mut out, events);
    out
}

/// `url` when it is http(s), mailto or relative (no scheme); `#` otherwise (`javascript:`,
/// `data:`, `file:`, …).
fn safe_url(url: CowStr<'_>) -> CowStr<'_> {
    let lower = url.trim_start().to_ascii_lowercase();
    let scheme = lower
        .split_once(':')
        .map(|(scheme, _)| scheme)
        .filter(|scheme| !scheme.contains(['/', '?', '#']));
    match scheme {
        None | Some("http" | "https" | "mailto") => url,
        Some(_) => CowStr::Borrowed("#"),
    }
}

/// One self-contained page: heading (the command) and subject (the configuration), the
/// rationale, the charts, and the inputs as JSON.
pub fn html_page(
    heading: &str,
    subject: &str,
    rationale: &str,
    charts: &[Chart],
    inputs: &serde_json::Value,
) -> String {
    let inputs =
        serde_json::to_string_pretty(inputs).unwrap_or_else(|e| format!("(inputs not shown: {e})"));
    let figures: String = charts
        .iter()
        .map(|c| format!("<figure>\n{}</figure>\n", c.svg))
        .collect();
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}: {subject}</title>
<style>
body {{ font-family: sans-serif; line-height: 1.45; max-width: 920px; margin: 2em auto; padding: 0 1em; color: #222; }}
code {{ background: #f2f2f2; padding: 0 .2em; border-radius: 3px; }}
pre {{ background: #f6f6f6; padding: 1em; overflow-x: auto; }}
pre code {{ background: none; padding: 0; }}
figure {{ margin: 1.5em 0; }}
figure svg {{ max-width: 100%; height: auto; }}
.subject {{ color: #555; margin-top: -.5em; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: .2em .5em; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p class="subject">{subject}</p>
<section id="rationale">
{rationale}</section>
<section id="charts">
<h2>Charts</h2>
{figures}</section>
<section id="inputs">
<h2>Inputs</h2>
<pre><code>{inputs}</code></pre>
</section>
</body>
</html>
"#,
        title = escape(heading),
        subject = escape(subject),
        rationale = markdown_html(rationale),
        figures = if figures.is_empty() {
            format!("<p>{}</p>\n", escape(NO_CHART))
        } else {
            figures
        },
        inputs = escape(&inputs),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_in_markdown_stays_text() {
        let html = markdown_html("**bold** <script>alert(1)</script> `x<y`");
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn links_keep_only_web_and_relative_addresses() {
        let html = markdown_html(
            "[a](javascript:alert(1)) [b](https://example.org/x) [c](docs/x.md) ![d](data:image/svg+xml,x)",
        );
        assert!(
            !html.contains("javascript:") && !html.contains("data:"),
            "{html}"
        );
        assert!(html.contains(r#"href="https://example.org/x""#), "{html}");
        assert!(html.contains(r#"href="docs/x.md""#), "{html}");
    }

    #[test]
    fn stacked_svg_places_charts_one_below_the_other() {
        let chart = |name, height| Chart {
            name,
            title: name.to_string(),
            width: 100.0,
            height,
            svg: "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\"></svg>\n".into(),
        };
        let svg = stacked_svg(&[chart("a", 50.0), chart("b", 70.0)]);
        assert!(svg.contains(r#"<svg x="0" y="0" xmlns"#), "{svg}");
        assert!(svg.contains(r#"<svg x="0" y="66" xmlns"#), "{svg}");
        assert!(
            svg.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" width="100" height="136""#),
            "{svg}"
        );
    }
}
