//! A panic inside a tool is a bug, but the request must still get an answer. [`catch`] runs a
//! tool and turns a panic into an error that names the tool; the MCP server and the CLI both
//! dispatch every tool through it.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A tool that panicked. The message asks for a report, since no input should get here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool `{tool}` failed with an internal error ({message}); this is a bug in moe-skills, please report it with the input")]
pub struct ToolPanic {
    pub tool: String,
    pub message: String,
}

/// Runs `tool`; a panic becomes a [`ToolPanic`] (and is logged).
pub fn catch<T>(tool: &str, run: impl FnOnce() -> T) -> Result<T, ToolPanic> {
    // Unwind safety: tools are functions of their input and an immutable catalog snapshot;
    // a panic leaves nothing half-updated that a later call could observe.
    catch_unwind(AssertUnwindSafe(run)).map_err(|payload| {
        let message = panic_message(payload.as_ref());
        tracing::error!(tool, %message, "tool panicked");
        ToolPanic {
            tool: tool.to_string(),
            message,
        }
    })
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-text payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_naming_the_tool() {
        let error = catch("size_cp", || -> u32 { panic!("divide by zero") }).unwrap_err();
        assert_eq!(error.tool, "size_cp");
        assert!(error.to_string().contains("`size_cp`"));
        assert!(error.to_string().contains("divide by zero"));
        assert_eq!(catch("size_cp", || 7), Ok(7));
    }
}
