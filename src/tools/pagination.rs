//! Cursor pagination for lists that grow with the catalog (MCP `cursor` / `nextCursor`).
//!
//! The cursor is the offset of the next item as decimal text. Clients treat it as opaque;
//! after a `--watch` reload a page may repeat or miss an item, and the list-changed
//! notification tells the client to list again.

/// Items per page of `resources/list` (about 200 bytes each).
pub const RESOURCES_PAGE_SIZE: usize = 500;
/// Skills per page of `skills/list`, `prompts/list` and `list_skills` (descriptions run to
/// 1,024 characters, and Skills-extension entries list every file).
pub const SKILLS_PAGE_SIZE: usize = 100;

/// A cursor this server did not hand out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cursor `{0}`; pass the `nextCursor` of the previous page unchanged, or no cursor for the first page")]
pub struct InvalidCursor(pub String);

/// One page of a list and the cursor of the next, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// The page of `items` that starts at `cursor` (the first page without one), at most `size`
/// long. Items before the cursor are skipped without being built, so pass cheap references
/// and map the page afterwards.
pub fn page<T>(
    items: impl Iterator<Item = T>,
    cursor: Option<&str>,
    size: usize,
) -> Result<Page<T>, InvalidCursor> {
    let offset = match cursor {
        None => 0,
        Some(text) => text
            .parse::<usize>()
            .map_err(|_| InvalidCursor(text.chars().take(64).collect()))?,
    };
    let size = size.max(1);
    let mut items: Vec<T> = items.skip(offset).take(size.saturating_add(1)).collect();
    let next_cursor = (items.len() > size).then(|| {
        items.truncate(size);
        offset.saturating_add(size).to_string()
    });
    Ok(Page { items, next_cursor })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_walk_the_whole_list_once() {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = page(0..7, cursor.as_deref(), 3).expect("page");
            assert!(page.items.len() <= 3);
            seen.extend(page.items);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, (0..7).collect::<Vec<_>>());
        // An exact multiple ends without an empty extra page.
        let last = page(0..6, Some("3"), 3).expect("page");
        assert_eq!((last.items, last.next_cursor), (vec![3, 4, 5], None));
        // Past the end is an empty last page, not an error.
        assert!(page(0..6, Some("99"), 3).expect("page").items.is_empty());
    }

    #[test]
    fn foreign_cursors_are_errors() {
        for cursor in ["", "abc", "-1", "1.5"] {
            assert!(page(0..3, Some(cursor), 2).is_err(), "{cursor}");
        }
    }
}
