//! The stdio transport: rmcp's line codec behind a front that answers what it would drop.
//!
//! rmcp discards a line that is not JSON and a line over its 16 MiB limit without a reply, so
//! a client that sent one waits forever. This front reads stdin line by line first: a line
//! over [`MAX_LINE_BYTES`] is answered with JSON-RPC's -32600 (its bytes are skipped, never
//! buffered), a line that is not JSON with -32700 (`id: null`, as JSON-RPC 2.0 asks), and
//! every other line goes to rmcp unchanged through an in-memory pipe. Replies from both reach
//! stdout whole lines at a time, so they never interleave.

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The largest message accepted, as rmcp's own limit and the HTTP body limit.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Bytes in flight between the front and rmcp.
const PIPE_BYTES: usize = 1 << 16;

/// Why a line was not passed on.
#[derive(Debug, Clone, PartialEq)]
enum Refused {
    TooLong,
    NotJson(String),
}

impl Refused {
    fn reply(&self) -> Vec<u8> {
        let (code, message) = match self {
            Refused::TooLong => (
                -32600,
                format!("message larger than {MAX_LINE_BYTES} bytes; it was not read"),
            ),
            Refused::NotJson(error) => (-32700, format!("parse error: {error}")),
        };
        let mut line =
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}})
                .to_string()
                .into_bytes();
        line.push(b'\n');
        line
    }
}

/// Checks one complete line (without its newline).
fn check(line: &[u8]) -> Result<(), Refused> {
    let text = line.strip_suffix(b"\r").unwrap_or(line);
    if text.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|error| Refused::NotJson(error.to_string()))
}

/// Reads `input` line by line: good lines go to `server`, refusals to `replies`. Returns at
/// the end of `input` (closing `server`, which ends the session).
async fn front<R, W>(input: R, mut server: W, replies: mpsc::Sender<Vec<u8>>) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut line: Vec<u8> = Vec::new();
    let mut oversized = false;
    loop {
        let buffer = input.fill_buf().await?;
        if buffer.is_empty() {
            // A last line without a newline is incomplete: nothing to answer.
            server.shutdown().await?;
            return Ok(());
        }
        let (chunk, complete) = match buffer.iter().position(|b| *b == b'\n') {
            Some(end) => (&buffer[..end], true),
            None => (buffer, false),
        };
        if !oversized && line.len() + chunk.len() > MAX_LINE_BYTES {
            oversized = true;
            line = Vec::new();
        }
        if !oversized {
            line.extend_from_slice(chunk);
        }
        let used = chunk.len() + usize::from(complete);
        input.consume(used);
        if !complete {
            continue;
        }
        let verdict = if oversized {
            Err(Refused::TooLong)
        } else {
            check(&line)
        };
        match verdict {
            Ok(()) => {
                line.push(b'\n');
                server.write_all(&line).await?;
                server.flush().await?;
            }
            Err(refused) => {
                tracing::warn!(?refused, "stdio message refused");
                if replies.send(refused.reply()).await.is_err() {
                    return Ok(());
                }
            }
        }
        line.clear();
        oversized = false;
    }
}

/// Copies rmcp's output to `replies` a whole line at a time.
async fn pump<R: AsyncRead + Unpin>(output: R, replies: mpsc::Sender<Vec<u8>>) {
    let mut output = BufReader::new(output);
    loop {
        let mut line = Vec::new();
        match output.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if replies.send(line).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Writes every reply line to `out` until all senders are gone.
async fn write_out<W: AsyncWrite + Unpin>(mut out: W, mut replies: mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = replies.recv().await {
        if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}

/// The halves rmcp serves on.
pub type ServerSide = (
    tokio::io::ReadHalf<tokio::io::DuplexStream>,
    tokio::io::WriteHalf<tokio::io::DuplexStream>,
);

/// The tasks that connect rmcp's side to `input` and `output`.
pub struct Front {
    reader: tokio::task::JoinHandle<std::io::Result<()>>,
    writer: tokio::task::JoinHandle<()>,
}

impl Front {
    pub fn start<R, W>(input: R, output: W) -> (ServerSide, Front)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
        let (server_read, server_write) = tokio::io::split(theirs);
        let (from_server, to_server) = tokio::io::split(ours);
        let (replies, queue) = mpsc::channel::<Vec<u8>>(64);
        let reader = tokio::spawn(front(input, to_server, replies.clone()));
        let pump_replies = replies;
        let writer = tokio::spawn(async move {
            let pumping = tokio::spawn(pump(from_server, pump_replies));
            write_out(output, queue).await;
            pumping.abort();
        });
        ((server_read, server_write), Front { reader, writer })
    }

    /// After the session: stops reading input and lets the last replies out.
    pub async fn finish(self) {
        self.reader.abort();
        let _ = self.reader.await;
        let _ = self.writer.await;
    }
}

/// Reads all of `input` through the front with a server that echoes each line, for tests.
#[cfg(test)]
async fn through_echo(input: &[u8]) -> String {
    use tokio::io::AsyncReadExt;
    let (mut client, ours) = tokio::io::duplex(PIPE_BYTES);
    let (output_read, output_write) = tokio::io::duplex(PIPE_BYTES);
    let ((server_read, mut server_write), Front { reader, writer }) =
        Front::start(ours, output_write);
    let echo = tokio::spawn(async move {
        let mut server_read = server_read;
        let mut all = Vec::new();
        let _ = server_read.read_to_end(&mut all).await;
        let _ = server_write.write_all(&all).await;
        let _ = server_write.shutdown().await;
    });
    let input = input.to_vec();
    let sending = tokio::spawn(async move {
        let _ = client.write_all(&input).await;
        let _ = client.shutdown().await;
        client
    });
    let mut text = String::new();
    let mut output_read = output_read;
    let reading = async {
        let _ = output_read.read_to_string(&mut text).await;
    };
    let finishing = async {
        let _ = reader.await;
        let _ = echo.await;
        let _ = writer.await;
    };
    tokio::join!(reading, finishing);
    drop(sending.await);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn good_lines_pass_and_bad_ones_are_answered() {
        let mut input = Vec::new();
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
        input.extend_from_slice(b"not json at all\n");
        input.extend_from_slice(&vec![b'x'; MAX_LINE_BYTES + 10]);
        input.extend_from_slice(b"\n[1,2]\n");
        let text = through_echo(&input).await;
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.contains(&"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"),
            "{text}"
        );
        assert!(lines.contains(&"[1,2]"), "{text}");
        assert!(text.contains("-32700"), "{text}");
        assert!(text.contains("-32600"), "{text}");
        assert_eq!(lines.len(), 4, "{text}");
    }
}
