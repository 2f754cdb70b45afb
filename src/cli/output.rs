//! Text or JSON output.

use std::io::Write;

use serde::Serialize;

use super::CliError;

/// Print `value` as pretty JSON when `json` is set, otherwise the text from `human`.
pub fn emit<T: Serialize>(
    json: bool,
    value: &T,
    human: impl FnOnce(&T) -> String,
) -> Result<(), CliError> {
    let text = if json {
        serde_json::to_string_pretty(value).map_err(|error| CliError::Output(error.to_string()))?
    } else {
        human(value)
    };
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{}", text.trim_end()).and_then(|()| stdout.flush()) {
        // The reader went away (`| head`): what it wanted it has; stop quietly.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result.map_err(|error| CliError::Output(error.to_string())),
    }
}

/// First line of `text`, cut to `width` characters with an ellipsis.
pub fn one_line(text: &str, width: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= width {
        flat
    } else {
        let cut: String = flat.chars().take(width.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}
