//! A `--skills-dir` from a third party cannot leak the host: links out of the root, link
//! loops, special files and huge files are refused with a diagnostic and never served
//! through the catalog, `resources/read` or `read_skill`.
#![cfg(unix)]

use std::os::unix::fs::symlink;
use std::path::Path;

use moe_skills::catalog::{Catalog, Severity};
use moe_skills::server::resources::read_resource;
use moe_skills::tools::skills::{read_skill, ReadSkillInput};

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, text).expect("write");
}

fn read_input(name: &str, file: Option<&str>) -> ReadSkillInput {
    serde_json::from_value(serde_json::json!({ "name": name, "file": file })).expect("input")
}

#[test]
fn hostile_skills_folder_serves_nothing_from_outside() {
    let outside = tempfile::tempdir().expect("tempdir");
    write(
        &outside.path().join("token"),
        "MOE_SKILLS_TOKEN=outside-secret",
    );
    write(
        &outside.path().join("folder/leak.md"),
        "outside-secret folder",
    );

    let root = tempfile::tempdir().expect("tempdir");
    let skill = root.path().join("leaky");
    write(
        &skill.join("SKILL.md"),
        "---\nname: leaky\ndescription: Tries to serve host files.\n---\n# Body\n",
    );
    symlink(outside.path().join("token"), skill.join("token.md")).expect("link");
    symlink(outside.path().join("folder"), skill.join("references")).expect("link");
    symlink("/proc/self/environ", skill.join("environ.txt")).expect("link");
    symlink("/etc/passwd", skill.join("passwd.txt")).expect("link");
    for i in 0..6 {
        symlink(".", skill.join(format!("x{i}"))).expect("link");
    }
    let huge = std::fs::File::create(skill.join("huge.md")).expect("create");
    huge.set_len(2 << 30).expect("set_len");

    let catalog = Catalog::load_with_embedded([root.path()]);
    let leaky = catalog
        .skill("leaky")
        .expect("the skill itself still loads");
    let served: Vec<&str> = leaky.files.iter().map(|file| file.path.as_str()).collect();
    assert_eq!(served, ["SKILL.md"]);

    for (name, why) in [
        ("token.md", "outside the root"),
        ("references", "outside the root"),
        ("passwd.txt", "outside the root"),
        ("x0", "loop"),
        ("x5", "loop"),
        ("huge.md", "over the limit"),
    ] {
        let shown = skill.join(name).display().to_string();
        assert!(
            catalog
                .diagnostics()
                .iter()
                .any(|diagnostic| diagnostic.file == shown
                    && diagnostic.severity == Severity::Warning
                    && diagnostic.message.contains(why)),
            "no diagnostic for {name}: {:#?}",
            catalog.diagnostics()
        );
    }
    let environ = skill.join("environ.txt").display().to_string();
    assert!(catalog
        .diagnostics()
        .iter()
        .any(|diagnostic| diagnostic.file == environ));

    for path in [
        "token.md",
        "references/leak.md",
        "environ.txt",
        "passwd.txt",
        "huge.md",
        "x0/SKILL.md",
    ] {
        let uri = format!("skill://leaky/{path}");
        assert!(read_resource(&catalog, &uri).is_err(), "{uri} was served");
        assert!(
            read_skill(&catalog, &read_input("leaky", Some(path))).is_err(),
            "read_skill served {path}"
        );
    }
    for file in catalog.skills().flat_map(|skill| skill.files.iter()) {
        let text = String::from_utf8_lossy(&file.bytes);
        assert!(!text.contains("outside-secret") && !text.contains("root:x:0:0"));
    }
}

#[test]
fn a_large_skill_md_is_served_in_bounded_parts() {
    let root = tempfile::tempdir().expect("tempdir");
    let mut text =
        String::from("---\nname: large\ndescription: One megabyte of instructions.\n---\n");
    while text.len() < 1 << 20 {
        text.push_str("A line of instructions that goes on for a while.\n");
    }
    write(&root.path().join("large/SKILL.md"), &text);
    let catalog = Catalog::load_with_embedded([root.path()]);
    let skill = catalog.skill("large").expect("loaded");

    let read = read_skill(&catalog, &read_input("large", None)).expect("read");
    let markdown = read.markdown.expect("text");
    assert!(markdown.len() <= moe_skills::tools::skills::MAX_TEXT_BYTES);
    assert!(text.starts_with(&markdown));
    assert_eq!(read.total_bytes, Some(text.len()));
    assert!(read.next_offset.is_some() && read.note.is_some());

    let prompt = moe_skills::server::prompts::render_skill_prompt(skill, None);
    let prompt = serde_json::to_string(&prompt).expect("json");
    assert!(prompt.len() < 80 * 1024, "{} bytes", prompt.len());
    assert!(prompt.contains("SKILL.md is cut here"));
}

#[test]
fn a_skill_folder_of_many_files_is_listed_in_pages() {
    let root = tempfile::tempdir().expect("tempdir");
    write(
        &root.path().join("wide/SKILL.md"),
        "---\nname: wide\ndescription: Many files.\n---\n# Body\n",
    );
    for i in 0..700 {
        write(&root.path().join(format!("wide/refs/{i:04}.md")), "x");
    }
    let catalog = Catalog::load_with_embedded([root.path()]);
    let mut uris = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = moe_skills::server::resources::read_directory(
            &catalog,
            "skill://wide/refs",
            cursor.as_deref(),
        )
        .expect("page");
        assert!(page.resources.len() <= 500);
        uris.extend(
            page.resources
                .into_iter()
                .map(|resource| resource.uri.clone()),
        );
        pages += 1;
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!((pages, uris.len()), (2, 700));
    assert!(moe_skills::server::resources::read_directory(
        &catalog,
        "skill://wide/refs",
        Some("?")
    )
    .is_err());
}
