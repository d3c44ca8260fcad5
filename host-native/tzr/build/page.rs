//! The browser inspector page that `tzr view` serves, built for the
//! binary to embed.
//!
//! The page is the static files of `host-wasm/web` plus `pkg/`: the
//! `tensorizer-wasm` crate compiled for `wasm32-unknown-unknown` with the
//! `wasm-release` profile, and the JavaScript glue `wasm-bindgen` makes
//! for it (the `wasm-bindgen-cli-support` crate, the library behind the
//! `wasm-bindgen` command, so nothing has to be installed but the target).
//! Everything lands in `$OUT_DIR/page`, and `$OUT_DIR/page.rs` lists the
//! files for `include_bytes!`.
//!
//! The wasm build is a nested `cargo build` in a target directory of its
//! own beside the outer profile's (`<target>/view-page`): the outer cargo
//! holds its own directory's lock, and one shared directory lets every
//! profile and every build of tzr reuse one compiled page.
//!
//! `TZR_VIEW_PAGE_DIR` names a page built already (a directory laid out
//! as the page, e.g. written by `tzr view --write-page DIR`): it is copied
//! and nothing is compiled.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The page's own files, in `host-wasm/web`.
const PAGE_FILES: &[&str] = &["index.html", "app.js", "remote.js", "worker.js", "style.css"];

/// The wasm-bindgen output the page imports, in `pkg/`.
const PKG_FILES: &[&str] = &["tensorizer_wasm.js", "tensorizer_wasm_bg.wasm"];

const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// A page built already, copied instead of compiled.
const PREBUILT_ENV: &str = "TZR_VIEW_PAGE_DIR";

/// What cargo would otherwise pass from the outer build to the nested
/// one: its target directory and target, flags, wrappers and profile
/// overrides all belong to the outer build (host code, another profile).
/// The jobserver (`CARGO_MAKEFLAGS`) is kept, so the nested build shares
/// the outer one's job slots.
const SCRUBBED_ENV: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "RUSTDOCFLAGS",
    "RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_PRIMARY_PACKAGE",
    "RA_RUSTC_WRAPPER",
    "TARGET",
    "HOST",
    "OUT_DIR",
    "NUM_JOBS",
    "OPT_LEVEL",
    "PROFILE",
    "DEBUG",
    "RUSTC_LINKER",
];

/// Prefixes of the environment scrubbed as [`SCRUBBED_ENV`]: per-profile
/// and per-target settings of the outer build, and the feature and
/// package variables cargo sets for this script.
const SCRUBBED_PREFIXES: &[&str] =
    &["CARGO_PROFILE_", "CARGO_TARGET_", "CARGO_FEATURE_", "CARGO_CFG_"];

/// How to build tzr without the page (every default feature but it).
const WITHOUT_PAGE: &str =
    "cargo install --path host-native/tzr --no-default-features --features http,s3,redis,cloud";

/// Builds the page into `$OUT_DIR`, or fails the build saying what is
/// missing and how to get it.
pub(crate) fn main() {
    println!("cargo::rerun-if-env-changed={PREBUILT_ENV}");
    if let Err(message) = build() {
        eprintln!(
            "\nerror: tzr's inspector page (cargo feature `view-page`) could not be built:\n{message}\n"
        );
        std::process::exit(1);
    }
}

fn build() -> Result<(), String> {
    let out = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let page = out.join("page");
    if page.exists() {
        fs::remove_dir_all(&page).map_err(|e| io(&page, e))?;
    }
    fs::create_dir_all(page.join("pkg")).map_err(|e| io(&page, e))?;
    match env::var_os(PREBUILT_ENV) {
        Some(dir) => copy_prebuilt(Path::new(&dir), &page)?,
        None => compile(&out, &page)?,
    }
    write_index(&out, &page)
}

/// Copies a built page's files from `dir`.
fn copy_prebuilt(dir: &Path, page: &Path) -> Result<(), String> {
    let files = PAGE_FILES
        .iter()
        .map(|f| f.to_string())
        .chain(PKG_FILES.iter().map(|f| format!("pkg/{f}")));
    for rel in files {
        let from = dir.join(&rel);
        println!("cargo::rerun-if-changed={}", from.display());
        fs::copy(&from, page.join(&rel))
            .map_err(|e| format!("{PREBUILT_ENV}={}: {}", dir.display(), io(&from, e)))?;
    }
    Ok(())
}

/// Compiles the wasm module, makes its glue and copies the page's files.
fn compile(out: &Path, page: &Path) -> Result<(), String> {
    let manifest =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?);
    let root = manifest.join("../..");
    let wasm_crate = root.join("host-wasm");
    if !wasm_crate.join("Cargo.toml").is_file() {
        return Err(format!(
            "the page is built from the tensorizer-rs source tree, and {} is not there.\n\
             Build tzr from a clone of the repository, or without the page:\n    {WITHOUT_PAGE}",
            wasm_crate.display()
        ));
    }
    for input in
        ["host-wasm/src", "host-wasm/Cargo.toml", "host-wasm/wasm-release.toml", "format-core/src"]
    {
        println!("cargo::rerun-if-changed={}", root.join(input).display());
    }
    for input in ["format-core/Cargo.toml", "Cargo.toml", "Cargo.lock"] {
        println!("cargo::rerun-if-changed={}", root.join(input).display());
    }
    check_target()?;

    let target_dir = nested_target_dir(out);
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.current_dir(&root)
        .args(["build", "--target", WASM_TARGET, "-p", "tensorizer-wasm", "--lib"])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--config")
        .arg(wasm_crate.join("wasm-release.toml"))
        // Not stripped: wasm-bindgen reads the target_features section, and
        // removes the name and producers sections itself.
        .args(["--profile", "wasm-release", "--config", "profile.wasm-release.strip=false"])
        .arg("--target-dir")
        .arg(&target_dir)
        // Cargo's messages are not this script's output (which cargo parses).
        .stdout(std::io::stderr());
    scrub_env(&mut cmd);
    let status =
        cmd.status().map_err(|e| format!("could not run {}: {e}", Path::new(&cargo).display()))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --target {WASM_TARGET} -p tensorizer-wasm --profile wasm-release` (in {}) failed ({status}); \
             its messages are above",
            target_dir.display()
        ));
    }

    let wasm = target_dir.join(WASM_TARGET).join("wasm-release/tensorizer_wasm.wasm");
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&wasm)
        .web(true)
        .map_err(|e| format!("wasm-bindgen: {e:#}"))?
        .typescript(false)
        // The command's default: `init()` with no argument fetches
        // tensorizer_wasm_bg.wasm next to the glue (the library's default
        // leaves the module path out).
        .omit_default_module_path(false)
        .remove_name_section(true)
        .remove_producers_section(true)
        .generate(page.join("pkg"))
        .map_err(|e| format!("wasm-bindgen on {}: {e:#}", wasm.display()))?;

    let web = wasm_crate.join("web");
    for file in PAGE_FILES {
        let from = web.join(file);
        println!("cargo::rerun-if-changed={}", from.display());
        fs::copy(&from, page.join(file)).map_err(|e| io(&from, e))?;
    }
    Ok(())
}

/// Fails with the command that installs the target when the compiler
/// has no standard library for it.
fn check_target() -> Result<(), String> {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("could not run {}: {e}", Path::new(&rustc).display()))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(WASM_TARGET).join("lib").is_dir() {
        return Ok(());
    }
    Err(format!(
        "the Rust target {WASM_TARGET} is not installed (no {}).\nInstall it:\n    rustup target add {WASM_TARGET}\n\
         or build tzr without the page (then `tzr view` needs --assets DIR):\n    {WITHOUT_PAGE}",
        sysroot.join("lib/rustlib").join(WASM_TARGET).display()
    ))
}

/// `<target>/view-page`, where `<target>` holds the outer build's profile
/// directory (`$OUT_DIR` is `<target>/[TRIPLE/]PROFILE/build/tzr-HASH/out`);
/// inside `$OUT_DIR` when the layout is another.
fn nested_target_dir(out: &Path) -> PathBuf {
    let build = out.ancestors().nth(2);
    match (build, out.ancestors().nth(4)) {
        (Some(b), Some(target)) if b.file_name().is_some_and(|n| n == "build") => {
            target.join("view-page")
        }
        _ => out.join("view-page"),
    }
}

/// Removes what belongs to the outer build from the nested one's
/// environment. The outer build's clippy wrapper is kept (with its
/// arguments), so a linted build of tzr lints the page's crate too.
fn scrub_env(cmd: &mut Command) {
    for (key, value) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if SCRUBBED_ENV.contains(&key) || SCRUBBED_PREFIXES.iter().any(|p| key.starts_with(p)) {
            cmd.env_remove(key);
        }
        if key == "RUSTC_WORKSPACE_WRAPPER" {
            let clippy = Path::new(&value)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("clippy-driver"));
            if !clippy {
                cmd.env_remove(key);
            }
        }
    }
}

/// Writes `$OUT_DIR/page.rs`: every file under `page`, by its path in the
/// page, with its bytes.
fn write_index(out: &Path, page: &Path) -> Result<(), String> {
    let mut files = Vec::new();
    collect(page, "", &mut files)?;
    files.sort();
    let mut src = String::from("/// The inspector page's files: path in the page, bytes.\n");
    src.push_str("pub(crate) static PAGE: &[(&str, &[u8])] = &[\n");
    for rel in &files {
        src.push_str(&format!(
            "    ({rel:?}, include_bytes!(concat!(env!(\"OUT_DIR\"), \"/page/{rel}\"))),\n"
        ));
    }
    src.push_str("];\n");
    let index = out.join("page.rs");
    fs::write(&index, src).map_err(|e| io(&index, e))
}

fn collect(dir: &Path, prefix: &str, files: &mut Vec<String>) -> Result<(), String> {
    for entry in fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let entry = entry.map_err(|e| io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = format!("{prefix}{name}");
        if entry.path().is_dir() {
            collect(&entry.path(), &format!("{rel}/"), files)?;
        } else {
            files.push(rel);
        }
    }
    Ok(())
}

fn io(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}
