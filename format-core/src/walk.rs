//! The files a command line names, for every host that takes many paths
//! (`tzr scan`, `tzr fingerprint`, the WASI validator): each path once, a
//! directory's regular files recursively and in sorted order. Which of a
//! directory's files are models is told afterwards from their bytes, by
//! the command (never from their names). [`scan_paths`] scans them as
//! models: a sharded checkpoint's index with its shards; [`Suppressions`]
//! finds and applies the suppression file.

mod models;
mod suppressions;

pub use models::{Scanned, many_json, scan_listed, scan_paths};
pub use suppressions::Suppressions;

use alloc::string::String;
use alloc::vec::Vec;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The path (or URI) as text.
    pub name: String,
    /// Found by walking a directory (rather than named): a file whose
    /// bytes are no known format is then left out, not reported.
    pub in_dir: bool,
}

/// The files `paths` name, each once: a directory's files, recursively and
/// sorted, and every other path (a file, a URI) as given. A file named
/// twice (or named and found in a directory) is listed once, where it
/// first appears.
pub fn expand(paths: &[PathBuf]) -> std::io::Result<Vec<Listed>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found = Vec::new();
            walk_dir(p, &mut found)?;
            found.sort();
            out.extend(
                found
                    .into_iter()
                    .map(|f| Listed { name: f.to_string_lossy().into_owned(), in_dir: true }),
            );
        } else {
            out.push(Listed { name: p.to_string_lossy().into_owned(), in_dir: false });
        }
    }
    let mut seen = BTreeSet::new();
    out.retain(|l| seen.insert(l.name.clone()));
    Ok(out)
}

/// Whether the output of `paths`, expanded to `listed`, is a document for
/// many files: more than one path, a directory, or a path that became
/// other than one file.
pub fn is_many(paths: &[PathBuf], listed: &[Listed]) -> bool {
    paths.len() != 1 || listed.len() != 1 || listed[0].in_dir
}

/// Regular files only: a symbolic link is not followed (a link to a
/// parent would walk forever).
fn walk_dir(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk_dir(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_walked_sorted_and_each_file_listed_once() {
        let dir = std::env::temp_dir().join(alloc::format!("tzr-walk-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for f in ["b", "a", "sub/c"] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        let listed = expand(&[dir.clone(), dir.join("a"), dir.join("missing")]).unwrap();
        let names: Vec<_> = listed
            .iter()
            .map(|l| (l.name.strip_prefix(dir.to_str().unwrap()).unwrap_or(&l.name), l.in_dir))
            .collect();
        assert_eq!(names, [("/a", true), ("/b", true), ("/sub/c", true), ("/missing", false)]);
        assert!(is_many(&[dir.join("a")], &listed[..1]));
        let one = expand(&[dir.join("b")]).unwrap();
        assert!(!is_many(&[dir.join("b")], &one));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
