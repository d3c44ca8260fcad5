//! The rules for `TensorDeserializer`'s reader options, in plain Rust: each
//! value tensorizer 2.12.1 accepts, what it means, and what is refused
//! with which error. `options.rs` wraps it for Python (it only converts
//! Python values into [`Raw`]); spec §18.8 lists the options.

use crate::errors::ArgError;

/// When loads hand out views of a private memory map (`mmap=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mmap {
    /// Every tensor is a private copy (the default).
    Off,
    /// Views of a local, unencrypted file's map (unsafe against in-place
    /// rewrites of the file).
    On,
    /// Views only of a file that cannot change (spec §23.6).
    Auto,
}

impl Mmap {
    /// The name Python sees.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
            Self::Auto => "auto",
        }
    }
}

/// What a meta tensor (no stored data) becomes (`meta_tensors=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaMode {
    /// Lazily zeroed memory, bounded by `max_meta_bytes` (tensorizer's).
    Zeros,
    /// One zero broadcast to the shape (no memory).
    Expand,
    /// A tensor on torch's `meta` device (no memory, no data).
    Meta,
}

impl MetaMode {
    const ALL: [Self; 3] = [Self::Zeros, Self::Expand, Self::Meta];

    /// The name Python passes and sees.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Zeros => "zeros",
            Self::Expand => "expand",
            Self::Meta => "meta",
        }
    }

    /// The mode named `name` (`None`: not a string).
    fn parse(name: Option<&str>, shown: &str) -> Result<Self, ArgError> {
        Self::ALL.into_iter().find(|m| Some(m.name()) == name).ok_or_else(|| {
            let names: Vec<String> = Self::ALL.iter().map(|m| format!("'{}'", m.name())).collect();
            ArgError::Value(format!(
                "meta_tensors must be one of {}, not {shown}",
                names.join(", ")
            ))
        })
    }
}

/// An integer argument as given: its value, or that it lies beyond `i64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Int {
    Fits(i64),
    TooLarge,
    TooSmall,
}

/// The `mmap=` value as given: a string, or anything else by its truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MmapArg<'a> {
    Text(&'a str),
    Truth(bool),
}

/// The arguments as Python gave them, converted but not yet judged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Raw<'a> {
    /// `verify_hash`, by truth (tensorizer tests it so).
    pub(crate) verify_hash: bool,
    /// `num_readers`: `None`, or an int (`Err`: another type, named).
    pub(crate) num_readers: Option<Result<Int, &'a str>>,
    /// `lazy_load`, by truth.
    pub(crate) lazy_load: bool,
    /// Whether a process group loads cooperatively.
    pub(crate) cooperative: bool,
    pub(crate) mmap: MmapArg<'a>,
    /// `meta_tensors`: the string, if it is one, and its `repr`.
    pub(crate) meta_tensors: (Option<&'a str>, &'a str),
    /// `max_meta_bytes`: `None`, or an int (`Err`: another type).
    pub(crate) max_meta_bytes: Option<Result<Int, ()>>,
}

/// The decided reader options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoadOptions {
    /// Check every tensor's hashes when it loads (a call's own
    /// `verify_hash` overrides it: [`LoadOptions::verify`]).
    pub(crate) verify_hash: bool,
    /// Parallel reads (`None`: the host's default).
    pub(crate) num_readers: Option<usize>,
    /// Load on first access instead of in the constructor.
    pub(crate) lazy_load: bool,
    pub(crate) mmap: Mmap,
    pub(crate) meta: MetaMode,
    /// Most bytes of zero-filled meta tensors (`None`: no bound).
    pub(crate) max_meta_bytes: Option<u64>,
}

/// The refusal of `lazy_load` with a process group: a cooperative load
/// happens in the constructor, which `lazy_load` skips.
pub(crate) fn check_cooperative(lazy_load: bool, cooperative: bool) -> Result<(), ArgError> {
    if lazy_load && cooperative {
        return Err(ArgError::Value(
            "process_group loads cooperatively in the constructor, which lazy_load=True skips: use \
             lazy_load=False, or pass process_group to load_into_module"
                .into(),
        ));
    }
    Ok(())
}

impl LoadOptions {
    /// Judges `raw`: the first refusal, in the order the arguments are
    /// documented, or the options.
    pub(crate) fn decide(raw: Raw<'_>) -> Result<Self, ArgError> {
        check_cooperative(raw.lazy_load, raw.cooperative)?;
        let num_readers = match raw.num_readers {
            None => None,
            Some(Err(kind)) => {
                return Err(ArgError::Type(format!(
                    "num_readers must be an int or None, not {kind}"
                )));
            }
            // True is one reader, as in tensorizer.
            Some(Ok(Int::Fits(n))) if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            Some(Ok(Int::TooLarge)) => Some(usize::MAX),
            Some(Ok(_)) => return Err(ArgError::Value("num_readers must be at least 1".into())),
        };
        let meta = MetaMode::parse(raw.meta_tensors.0, raw.meta_tensors.1)?;
        let max_meta_bytes = match raw.max_meta_bytes {
            None => None,
            Some(Ok(Int::Fits(n))) if n >= 0 => Some(n.unsigned_abs()),
            Some(Ok(Int::TooLarge)) => Some(u64::MAX),
            Some(_) => {
                return Err(ArgError::Value(
                    "max_meta_bytes must be a non-negative int or None".into(),
                ));
            }
        };
        let mmap = match raw.mmap {
            MmapArg::Text("auto") => Mmap::Auto,
            MmapArg::Text(other) => {
                return Err(ArgError::Value(format!(
                    "mmap must be True, False, None or \"auto\", not {other:?}"
                )));
            }
            MmapArg::Truth(true) => Mmap::On,
            MmapArg::Truth(false) => Mmap::Off,
        };
        Ok(Self {
            verify_hash: raw.verify_hash,
            num_readers,
            lazy_load: raw.lazy_load,
            mmap,
            meta,
            max_meta_bytes,
        })
    }

    /// Whether a call checks hashes: its own `verify_hash` (by truth), or
    /// the constructor's when it passes none.
    pub(crate) fn verify(&self, call: Option<bool>) -> bool {
        tensorizer_native::read::call_verifies(call, self.verify_hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> Raw<'static> {
        Raw {
            verify_hash: false,
            num_readers: None,
            lazy_load: false,
            cooperative: false,
            mmap: MmapArg::Truth(false),
            meta_tensors: (Some("zeros"), "'zeros'"),
            max_meta_bytes: Some(Ok(Int::Fits(4 << 30))),
        }
    }

    #[test]
    fn defaults_are_tensorizers() {
        let o = LoadOptions::decide(raw()).unwrap();
        assert_eq!(
            (o.verify_hash, o.num_readers, o.mmap, o.meta),
            (false, None, Mmap::Off, MetaMode::Zeros)
        );
        assert!(o.verify(Some(true)) && !o.verify(None));
    }

    #[test]
    fn refusals_name_the_argument_and_the_rule() {
        let bad = |r: Raw<'static>| LoadOptions::decide(r).unwrap_err();
        assert!(
            matches!(bad(Raw { num_readers: Some(Ok(Int::Fits(0))), ..raw() }), ArgError::Value(m) if m.contains("at least 1"))
        );
        assert!(
            matches!(bad(Raw { num_readers: Some(Err("str")), ..raw() }), ArgError::Type(m) if m.contains("not str"))
        );
        assert!(
            matches!(bad(Raw { mmap: MmapArg::Text("yes"), ..raw() }), ArgError::Value(m) if m.contains("\"auto\""))
        );
        assert!(
            matches!(bad(Raw { meta_tensors: (None, "1"), ..raw() }), ArgError::Value(m) if m.contains("'expand'"))
        );
        assert!(matches!(
            bad(Raw { max_meta_bytes: Some(Ok(Int::TooSmall)), ..raw() }),
            ArgError::Value(_)
        ));
        assert!(
            matches!(bad(Raw { lazy_load: true, cooperative: true, ..raw() }), ArgError::Value(m) if m.contains("lazy_load"))
        );
    }

    #[test]
    fn huge_counts_saturate() {
        let o = LoadOptions::decide(Raw {
            num_readers: Some(Ok(Int::TooLarge)),
            max_meta_bytes: Some(Ok(Int::TooLarge)),
            mmap: MmapArg::Text("auto"),
            ..raw()
        })
        .unwrap();
        assert_eq!(
            (o.num_readers, o.max_meta_bytes, o.mmap),
            (Some(usize::MAX), Some(u64::MAX), Mmap::Auto)
        );
    }
}
