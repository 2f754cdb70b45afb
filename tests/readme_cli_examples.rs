//! The README's command-line examples show what the binary prints today: every command shown
//! with its output (a `bash` block of one `moe-skills` command followed by a `text` block, or a
//! `console` block of `$ moe-skills …` and its output) is run, and every piece of each shown
//! line between `…` abridgements must appear in the real output. (The MCP tool examples are
//! refreshed by `scripts/readme-examples.py`.)

use std::path::{Path, PathBuf};
use std::process::Command;

struct Example {
    command: String,
    shown: String,
}

/// The fenced blocks of a Markdown text: (info string, body).
fn fenced_blocks(markdown: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let mut body = Vec::new();
        for inner in lines.by_ref() {
            if inner.starts_with("```") {
                break;
            }
            body.push(inner);
        }
        blocks.push((info.trim().to_string(), body.join("\n")));
    }
    blocks
}

fn examples(markdown: &str) -> Vec<Example> {
    let blocks = fenced_blocks(markdown);
    let mut found = Vec::new();
    for (i, (info, body)) in blocks.iter().enumerate() {
        if info == "bash" {
            let command = body.replace("\\\n", " ");
            let single = command.lines().count() == 1 && command.starts_with("moe-skills ");
            if let (true, Some((next_info, shown))) = (single, blocks.get(i + 1)) {
                if next_info == "text" {
                    found.push(Example {
                        command,
                        shown: shown.clone(),
                    });
                }
            }
        } else if info == "console" {
            let mut lines = body.lines();
            if let Some(command) = lines.next().and_then(|l| l.strip_prefix("$ ")) {
                found.push(Example {
                    command: command.to_string(),
                    shown: lines.collect::<Vec<_>>().join("\n"),
                });
            }
        }
    }
    found
}

/// A file under `dir` whose name ends with `suffix`, for a path the README abridges
/// (`…-full-dump.log`).
fn find_by_suffix(dir: &Path, suffix: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            if let Some(found) = find_by_suffix(&path, suffix) {
                return Some(found);
            }
        } else if path.to_string_lossy().ends_with(suffix) {
            return Some(path);
        }
    }
    None
}

fn arguments(command: &str, root: &Path) -> Vec<String> {
    command
        .split_whitespace()
        .skip(1)
        .map(|word| match word.strip_prefix('…') {
            Some(suffix) => find_by_suffix(&root.join("tests/fixtures"), suffix)
                .unwrap_or_else(|| panic!("no fixture ends with {suffix}"))
                .to_string_lossy()
                .into_owned(),
            None => word.to_string(),
        })
        .collect()
}

fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_readmes_command_examples_show_todays_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let examples = examples(&readme);
    assert!(
        examples.len() >= 3,
        "expected the README's command examples, found {}",
        examples.len()
    );
    let mut stale = Vec::new();
    for example in &examples {
        let output = Command::new(env!("CARGO_BIN_EXE_moe-skills"))
            .args(arguments(&example.command, root))
            .current_dir(root)
            .output()
            .expect("run moe-skills");
        let printed = squeeze(&String::from_utf8_lossy(&output.stdout));
        for line in example.shown.lines() {
            for piece in line.split('…').map(squeeze).filter(|p| !p.is_empty()) {
                if !printed.contains(&piece) {
                    stale.push(format!("`{}`: {piece}", example.command));
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "README output no longer printed (update the example):\n{}",
        stale.join("\n")
    );
}
