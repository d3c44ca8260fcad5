//! Replacing a local file atomically: write a temporary file beside the
//! target, fsync it, rename it over the target, fsync the directory. A
//! reader of the target sees the old file or the new one, never a part.
//!
//! The new file gets the permissions the user expects: an existing
//! target's mode is kept, and a new file gets `0666 & !umask`, as any
//! program that opens the path for writing would create it. A symlink at
//! the target is written through (its final target is replaced), not
//! replaced by a regular file.

use std::fs::{self, File, Permissions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

use crate::error::{Error, Result, file_err};

/// Most symlinks followed from the target to the file it names (Linux's
/// own limit for one path lookup).
pub const MAX_SYMLINK_HOPS: usize = 40;

/// Mode of a new file when the umask cannot be read.
const FALLBACK_MODE: u32 = 0o644;

/// A file being written that replaces `target` on [`AtomicFile::commit`],
/// and is deleted if dropped before that.
pub struct AtomicFile {
    tmp: NamedTempFile,
    target: PathBuf,
    name: String,
}

impl AtomicFile {
    /// Creates the temporary file beside the file `path` resolves to.
    pub fn create(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let target = resolve_symlinks(path).map_err(file_err(&name))?;
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file_name =
            target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{file_name}."))
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(file_err(&name))?;
        // Set explicitly: a mode given at creation would pass through the
        // umask again, and an existing target's mode must be kept as is.
        let mode = match fs::metadata(&target) {
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(_) => new_file_mode(),
        };
        tmp.as_file().set_permissions(Permissions::from_mode(mode)).map_err(file_err(&name))?;
        Ok(Self { tmp, target, name })
    }

    /// The temporary file.
    pub fn file(&self) -> &File {
        self.tmp.as_file()
    }

    /// The temporary file, mutably (for `Write`).
    pub fn file_mut(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// The name errors use (the path as the caller gave it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Makes the data durable, renames it over the target and makes the
    /// rename durable.
    pub fn commit(self) -> Result<()> {
        let name = self.name;
        self.tmp.as_file().sync_all().map_err(file_err(&name))?;
        self.tmp
            .persist(&self.target)
            .map_err(|e| Error::File { file: name.clone(), source: e.error })?;
        if let Some(dir) = self.target.parent().filter(|p| !p.as_os_str().is_empty())
            && let Ok(d) = File::open(dir)
        {
            // Best effort: some file systems refuse to fsync a directory.
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// The path a write to `path` should replace: `path` itself, or the file
/// its chain of symlinks ends at (which need not exist yet).
fn resolve_symlinks(path: &Path) -> std::io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        match fs::symlink_metadata(&current) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(std::io::Error::other(format!("more than {MAX_SYMLINK_HOPS} symlinks to follow")))
}

/// `0666 & !umask`, the umask read from `/proc/self/status` (reading it
/// with `umask(2)` would have to change it, racing other threads).
fn new_file_mode() -> u32 {
    let umask = fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
    });
    umask.map_or(FALLBACK_MODE, |u| 0o666 & !u)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_chains_resolve_and_loops_end() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::os::unix::fs::symlink("real", dir.path().join("a")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a"), dir.path().join("b")).unwrap();
        assert_eq!(resolve_symlinks(&dir.path().join("b")).unwrap(), real);
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        assert!(resolve_symlinks(&dir.path().join("loop")).is_err());
    }
}
