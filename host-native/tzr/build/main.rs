//! tzr's build script: with the cargo feature `view-page` (on by default),
//! builds the browser inspector page for the binary to embed (`page.rs`).

#[cfg(feature = "view-page")]
mod page;

fn main() {
    #[cfg(feature = "view-page")]
    page::main();
}
