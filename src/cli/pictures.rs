//! `--svg FILE` and `--html FILE` on `check`, `plan-layouts` and `triage-oom`: the answer's
//! charts as one SVG (stacked top to bottom), or one self-contained HTML page with the
//! rationale, the charts and the inputs.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;

use super::CliError;
use crate::charts::{self, Chart};

#[derive(Debug, Clone, Default, Args)]
pub struct PictureArgs {
    /// Write the answer's charts to FILE as one SVG, stacked top to bottom (check, plan-layouts:
    /// memory per pipeline rank against the usable capacity, then the step-time breakdown; for
    /// plan-layouts, of the best layout. triage-oom: waterfalls of peak memory and step time,
    /// one step per changed setting). The text or --json answer is printed as usual.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Write one self-contained HTML page to FILE: the rationale (Markdown rendered), the
    /// charts inline and the inputs as JSON; it needs nothing else to open.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

impl PictureArgs {
    fn wanted(&self) -> bool {
        self.svg.is_some() || self.html.is_some()
    }

    /// Renders the charts (only when a file is asked for) and writes the files.
    pub fn write<I: Serialize>(
        &self,
        heading: &str,
        subject: &str,
        rationale: &str,
        inputs: &I,
        charts: impl FnOnce() -> Result<Vec<Chart>, CliError>,
    ) -> Result<(), CliError> {
        if !self.wanted() {
            return Ok(());
        }
        let charts = charts()?;
        if let Some(path) = &self.svg {
            write_file(path, &charts::page::stacked_svg(&charts))?;
        }
        if let Some(path) = &self.html {
            let inputs =
                serde_json::to_value(inputs).map_err(|e| CliError::Output(e.to_string()))?;
            write_file(
                path,
                &charts::page::html_page(heading, subject, rationale, &charts, &inputs),
            )?;
        }
        Ok(())
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text).map_err(|e| CliError::Output(format!("{}: {e}", path.display())))
}
