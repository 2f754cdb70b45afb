//! The default catalog compiled into the binary: the repository's `skills/` and `cards/`.

use include_dir::{include_dir, Dir};

/// `skills/` at build time.
pub static EMBEDDED_SKILLS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/skills");

/// `cards/` at build time.
pub static EMBEDDED_CARDS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/cards");
