// The embedded catalog (include_dir! of skills/ and cards/) must be rebuilt when files are
// added or removed there, not only when an included file changes.
fn main() {
    println!("cargo:rerun-if-changed=skills");
    println!("cargo:rerun-if-changed=cards");
}
