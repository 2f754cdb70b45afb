//! Command-line adapter over `tools`.
//!
//! Each subcommand is one enum variant in [`Command`] and one module with its arguments and
//! a `run` function; output goes through [`output::emit`] so that `--json` works everywhere.

pub mod output;
pub mod pictures;
pub mod python_modules;
pub mod serve;
pub mod skills;
pub mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::catalog::{Catalog, RootSource, Severity};

#[derive(Debug, Parser)]
#[command(
    name = "moe-skills",
    version,
    about = "MCP skill server for training Mixture-of-Experts models at long context"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Extra skills folder, loaded after the embedded catalog (repeatable; later folders
    /// override earlier ones by skill name). A folder of skill folders, a repository with
    /// skills/ and cards/, or a single skill folder.
    #[arg(long = "skills-dir", value_name = "DIR", global = true)]
    pub skills_dirs: Vec<PathBuf>,
    /// Your cluster's calibration card (written by `calibrate --log … --write FILE`): its
    /// factors replace the card values for its GPU in every answer, which names it. Loaded
    /// after every --skills-dir.
    #[arg(long, value_name = "FILE", global = true)]
    pub calibration: Option<PathBuf>,
}

impl GlobalArgs {
    /// The embedded catalog followed by every `--skills-dir`.
    pub fn roots(&self) -> Vec<RootSource> {
        std::iter::once(RootSource::Embedded)
            .chain(self.skills_dirs.iter().cloned().map(RootSource::Directory))
            .chain(
                self.calibration
                    .iter()
                    .cloned()
                    .map(RootSource::CalibrationFile),
            )
            .collect()
    }

    /// Loads the catalog; a file of the user's folders that could not be loaded is named on
    /// stderr, so a card with a missing field is never silently absent from the answer.
    pub fn load_catalog(&self) -> Catalog {
        let catalog = Catalog::load(&self.roots());
        for diagnostic in catalog
            .diagnostics()
            .iter()
            .filter(|d| d.severity == Severity::Error)
        {
            eprintln!(
                "warning: {}: {}; the file was not loaded (`moe-skills skills validate DIR` lists every problem)",
                diagnostic.file, diagnostic.message
            );
        }
        catalog
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the MCP server (stdio by default; streamable HTTP with --http).
    Serve(serve::ServeArgs),
    /// List, show, search and validate skills.
    #[command(subcommand)]
    Skills(skills::SkillsCommand),
    #[command(flatten)]
    Tool(tools::ToolCommand),
}

/// A failed command; the message is printed as `error: ...`.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Skill(#[from] crate::tools::skills::SkillToolError),
    #[error(transparent)]
    Serve(#[from] crate::server::ServeError),
    #[error(transparent)]
    Watch(#[from] crate::catalog::watch::WatchError),
    #[error(transparent)]
    Tool(#[from] crate::tools::common::ToolError),
    #[error(transparent)]
    Panic(#[from] crate::tools::guard::ToolPanic),
    #[error("{0}")]
    Input(String),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot write output: {0}")]
    Output(String),
    /// Already reported (e.g. validation diagnostics); exit non-zero without a message.
    #[error("")]
    Reported,
    /// `check` printed a configuration that does not fit or has violations: exit status
    /// [`EXIT_NO`], no message (the answer says why).
    #[error("")]
    DoesNotFit,
}

/// Exit statuses, as `grep` and `diff` use them: the answer is "no" (`check`: does not fit
/// or has violations; `skills validate`: errors found) is 1; could not answer (bad input,
/// unknown card, I/O) is 2, the status clap gives a usage error. CI can tell a rejected
/// configuration from a broken step.
pub const EXIT_NO: u8 = 1;
pub const EXIT_ERROR: u8 = 2;

fn init_logging(default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MOE_SKILLS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve(args) => {
            init_logging("info");
            serve::run(&cli.global, &args)
        }
        // Tool commands run under the panic guard: a bug prints an error naming the tool.
        Command::Skills(command) => {
            init_logging("warn");
            crate::tools::guard::catch("skills", || skills::run(&cli.global, &command))?
        }
        Command::Tool(command) => {
            init_logging("warn");
            crate::tools::guard::catch(command.tool_name(), || tools::run(&cli.global, &command))?
        }
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Reported | CliError::DoesNotFit) => ExitCode::from(EXIT_NO),
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every flag and positional argument of every subcommand, at any depth, with no help text.
    fn without_help(command: &clap::Command, path: &str, found: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                found.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in command.get_subcommands() {
            without_help(sub, &format!("{path} {}", sub.get_name()), found);
        }
    }

    #[test]
    fn every_flag_and_argument_has_help() {
        let mut found = Vec::new();
        without_help(&Cli::command(), "moe-skills", &mut found);
        assert!(found.is_empty(), "arguments without help: {found:?}");
    }

    #[test]
    fn skills_help_lists_validate() {
        let mut command = Cli::command();
        let skills = command
            .find_subcommand_mut("skills")
            .expect("skills subcommand");
        let help = skills.render_help().to_string();
        assert!(help.contains("validate"), "{help}");
    }
}
