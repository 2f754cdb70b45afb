//! Tools: one function per tool, shared by the MCP server and the CLI.

pub mod skills;
