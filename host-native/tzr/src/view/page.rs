//! The inspector page `tzr view` serves: the copy compiled into the binary
//! (cargo feature `view-page`; the build script makes it, `build/page.rs`),
//! or a directory laid out as the page (`--assets`, `$TZR_VIEW_ASSETS`).

use std::fs::File;
use std::path::{Path, PathBuf};

use tensorizer_native::Error;

#[cfg(feature = "view-page")]
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/page.rs"));
}

/// Environment variable naming a page directory to serve.
pub(super) const ASSETS_ENV: &str = "TZR_VIEW_ASSETS";

/// A file every built page has: a directory without it is not a page.
pub(super) const BUILT_MARKER: &str = "pkg/tensorizer_wasm_bg.wasm";

/// Where the page's files come from.
pub(super) enum Page {
    /// Compiled into this binary.
    #[cfg(feature = "view-page")]
    Embedded,
    /// A directory laid out as the page.
    Dir(PathBuf),
}

/// A response body: a file of the page, or the file being inspected.
pub(super) enum Body {
    #[cfg(feature = "view-page")]
    Bytes(&'static [u8]),
    File(File),
}

impl Page {
    /// `--assets`, else `$TZR_VIEW_ASSETS`, else the embedded page; a
    /// directory must hold a built page.
    pub(super) fn find(given: Option<&Path>) -> Result<Self, Error> {
        let dir = match (given, std::env::var_os(ASSETS_ENV)) {
            (Some(d), _) => d.to_path_buf(),
            (None, Some(d)) => PathBuf::from(d),
            #[cfg(feature = "view-page")]
            (None, None) => return Ok(Self::Embedded),
            #[cfg(not(feature = "view-page"))]
            (None, None) => {
                return Err(Error::Invalid(format!(
                    "this tzr was built without the inspector page (cargo feature view-page). Reinstall it with \
                     the page (needs `rustup target add wasm32-unknown-unknown`): cargo install --path host-native/tzr \
                     in the tensorizer-rs repository; or pass --assets DIR or set {ASSETS_ENV}=DIR, DIR holding a page \
                     written by `tzr view --write-page DIR` from a tzr that has it"
                )));
            }
        };
        if dir.join("index.html").is_file() && dir.join(BUILT_MARKER).is_file() {
            return Ok(Self::Dir(dir));
        }
        Err(Error::Invalid(format!(
            "{} is not a built inspector page (no index.html or {BUILT_MARKER}): give --assets or {ASSETS_ENV} a \
             directory written by `tzr view --write-page DIR`, or leave both out to serve the page built into tzr",
            dir.display()
        )))
    }

    /// The page's file at `path` (`/` is `index.html`) and its
    /// `Content-Type`: every component plain (letters, digits, `.`, `_`,
    /// `-`; none starting with `.`), and the file must exist.
    pub(super) fn get(&self, path: &str) -> Option<(Body, &'static str)> {
        let rel = path.trim_start_matches('/');
        let rel = if rel.is_empty() { "index.html" } else { rel };
        let plain = |part: &str| {
            !part.is_empty()
                && !part.starts_with('.')
                && part.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !rel.split('/').all(plain) {
            return None;
        }
        let file = match self {
            #[cfg(feature = "view-page")]
            Self::Embedded => {
                embedded::PAGE.iter().find(|(p, _)| *p == rel).map(|(_, bytes)| Body::Bytes(bytes))
            }
            Self::Dir(root) => {
                let file = rel.split('/').fold(root.clone(), |p, part| p.join(part));
                if !file.is_file() {
                    return None;
                }
                File::open(file).ok().map(Body::File)
            }
        };
        file.map(|f| (f, content_type(rel)))
    }
}

/// Writes the page built into this binary to `dir` (created if missing),
/// for a web server or another `tzr view --assets`.
pub(super) fn write(dir: &Path) -> Result<(), Error> {
    #[cfg(feature = "view-page")]
    {
        for (rel, bytes) in embedded::PAGE {
            let path = dir.join(rel);
            let io = |source| Error::File { file: path.display().to_string(), source };
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io)?;
            }
            std::fs::write(&path, bytes).map_err(io)?;
        }
        Ok(())
    }
    #[cfg(not(feature = "view-page"))]
    {
        Err(Error::Invalid(format!(
            "this tzr was built without the inspector page (cargo feature view-page): nothing to write to {}",
            dir.display()
        )))
    }
}

/// The `Content-Type` of a page file, by its extension.
fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("ts") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_stay_inside_the_page() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "x").unwrap();
        let page = Page::Dir(dir.path().to_path_buf());
        assert!(matches!(page.get("/"), Some((_, "text/html; charset=utf-8"))));
        assert!(page.get("/index.html").is_some());
        for bad in ["/../index.html", "/.git/config", "/pkg//x", "/a\\b", "/missing.js"] {
            assert!(page.get(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_directory_must_hold_a_built_page() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "x").unwrap();
        let err = Page::find(Some(dir.path())).err().unwrap().to_string();
        assert!(
            err.contains("not a built inspector page") && err.contains("--write-page"),
            "{err}"
        );
        std::fs::create_dir(dir.path().join("pkg")).unwrap();
        std::fs::write(dir.path().join(BUILT_MARKER), b"\0asm").unwrap();
        assert!(Page::find(Some(dir.path())).is_ok());
    }

    /// The embedded page is complete: the files `index.html` loads and the
    /// wasm module, which starts with wasm's magic.
    #[cfg(feature = "view-page")]
    #[test]
    fn the_embedded_page_is_whole_and_can_be_written_out() {
        let page = Page::Embedded;
        for f in [
            "index.html",
            "app.js",
            "remote.js",
            "worker.js",
            "style.css",
            "pkg/tensorizer_wasm.js",
        ] {
            assert!(page.get(&format!("/{f}")).is_some(), "{f}");
        }
        let Some((Body::Bytes(wasm), "application/wasm")) = page.get(BUILT_MARKER) else {
            panic!("no {BUILT_MARKER}")
        };
        assert!(wasm.starts_with(b"\0asm"));
        let dir = tempfile::tempdir().unwrap();
        write(dir.path()).unwrap();
        assert_eq!(std::fs::read(dir.path().join(BUILT_MARKER)).unwrap(), wasm);
        assert!(matches!(Page::find(Some(dir.path())), Ok(Page::Dir(_))));
    }
}
