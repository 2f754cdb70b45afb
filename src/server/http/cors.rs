//! CORS for the origins named with `--allow-origin`, so a browser page served from one of
//! them can call the server: preflight answers and `Access-Control-*` headers. The built-in
//! loopback origins get none (a page on some local port is not thereby trusted to read
//! answers), and no origin is ever answered with `*`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// How long a browser may cache a preflight answer: long enough to skip one per call, short
/// enough that a restart with a different `--allow-origin` list takes effect soon.
const PREFLIGHT_MAX_AGE_SECS: &str = "600";
const ALLOWED_METHODS: &str = "GET, POST, DELETE";
/// Headers a page may read: the session id is needed to continue a session.
const EXPOSED_HEADERS: &str = "mcp-session-id, mcp-protocol-version, www-authenticate";

/// One `--allow-origin` entry: `scheme://host[:port|:*]`, compared case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginPattern {
    scheme: String,
    host: String,
    /// `None` matches any port (`:*`).
    port: Option<u16>,
}

impl OriginPattern {
    /// `None` for entries that cannot be a browser origin (`null`, no scheme, a path).
    pub fn parse(pattern: &str) -> Option<Self> {
        let (scheme, host, port) = split_origin(pattern)?;
        let port = match port {
            Some("*") => None,
            Some(port) => Some(port.parse().ok()?),
            None => Some(default_port(&scheme)?),
        };
        Some(Self { scheme, host, port })
    }

    fn matches(&self, origin: &str) -> bool {
        let Some((scheme, host, port)) = split_origin(origin) else {
            return false;
        };
        let port = match port {
            Some(port) => port.parse().ok(),
            None => default_port(&scheme),
        };
        scheme == self.scheme
            && host == self.host
            && port.is_some()
            && (self.port.is_none() || self.port == port)
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// `(scheme, host, port)` of `scheme://host[:port]`, lower-cased; IPv6 hosts keep brackets.
fn split_origin(origin: &str) -> Option<(String, String, Option<&str>)> {
    let (scheme, rest) = origin.trim().split_once("://")?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    let (host, port) = if let Some(v6_end) = rest.strip_prefix('[').and_then(|r| r.find(']')) {
        let host = &rest[..v6_end + 2];
        match &rest[v6_end + 2..] {
            "" => (host, None),
            after => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    Some((scheme.to_ascii_lowercase(), host.to_ascii_lowercase(), port))
}

/// Axum middleware: outermost, so a preflight (which never carries a token) is answered
/// before the bearer check.
pub async fn cors(
    State(patterns): State<Arc<[OriginPattern]>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(origin) = allowed_origin(&patterns, request.headers()) else {
        return next.run(request).await;
    };
    if request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        let mut response = StatusCode::NO_CONTENT.into_response();
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOWED_METHODS),
        );
        // The origin is trusted by configuration: allow the headers it asks for (MCP adds
        // protocol headers over time; a fixed list would break new clients).
        if let Some(asked) = request
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        {
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(PREFLIGHT_MAX_AGE_SECS),
        );
        headers.insert(header::VARY, HeaderValue::from_static("Origin"));
        return response;
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSED_HEADERS),
    );
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    response
}

fn allowed_origin(patterns: &[OriginPattern], headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    patterns
        .iter()
        .any(|pattern| pattern.matches(text))
        .then(|| origin.clone())
}

#[cfg(test)]
mod tests {
    use super::OriginPattern;

    #[test]
    fn patterns_match_scheme_host_and_port() {
        let exact = OriginPattern::parse("https://App.example:8443").unwrap();
        assert!(exact.matches("https://app.example:8443"));
        assert!(!exact.matches("https://app.example"));
        assert!(!exact.matches("http://app.example:8443"));
        assert!(!exact.matches("https://app.example.evil:8443"));
        let default_port = OriginPattern::parse("https://app.example").unwrap();
        assert!(default_port.matches("https://app.example"));
        assert!(default_port.matches("https://app.example:443"));
        assert!(!default_port.matches("https://app.example:444"));
        let any_port = OriginPattern::parse("http://[::1]:*").unwrap();
        assert!(any_port.matches("http://[::1]:3000"));
        assert!(any_port.matches("http://[::1]"));
        assert!(!any_port.matches("http://[::2]:3000"));
        assert!(OriginPattern::parse("null").is_none());
        assert!(OriginPattern::parse("https://app.example/path").is_none());
        assert!(!exact.matches("null"));
    }
}
