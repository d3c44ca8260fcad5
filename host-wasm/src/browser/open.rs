//! Opening a file: one read of its first bytes tells the format (GGUF's
//! magic, or the core's [`sniff_format`]), then the format's header and
//! index are read (for a tensorizer file, the rest of
//! the metadata index if the first read did not hold it all).

use tensorizer_core::layout::{MAGIC, METADATA_OFFSET, ParseLimits};
use tensorizer_core::report::HeaderSummary;
use tensorizer_core::totals::top_module;
use tensorizer_core::{Sniffed, sniff_format};

use crate::error::ValidateError;
use crate::validate::{Inspection, header_read_len, parse_header, parse_index, zeroed};

use super::gguf;
use super::safetensors;
use super::source::{AsyncSource, read_exact};
use super::summary::{Row, Shared, Summary, field, name_and_path, totals};
use super::torch;

/// Bytes read first: the file header and, for most tensorizer files, the
/// whole metadata index (tensorizer reserves 256 KiB, mostly unused, so
/// the rest is read only if the index really is longer).
pub const FIRST_READ: u64 = 64 << 10;

/// Longest metadata index the page reads into memory.
pub const MAX_INDEX_BYTES: u64 = 512 << 20;

/// A parsed file, ready to summarize or verify.
#[derive(Debug)]
pub enum Opened {
    /// A tensorizer file: its header and index.
    Tensorizer(Inspection),
    /// A safetensors file: the summary is all there is.
    Safetensors(Box<Summary>),
    /// A `torch.save` zip checkpoint.
    Torch(Box<torch::Index>),
    /// A GGUF file: the summary of its header is all there is.
    Gguf(Box<Summary>),
}

/// Reads the first bytes, tells the format, and reads its header and index.
pub async fn open<S: AsyncSource>(
    src: &mut S,
    limits: &ParseLimits,
) -> Result<Opened, ValidateError> {
    let len = src.len();
    let head = read_exact(src, 0, len.min(FIRST_READ), "the first bytes").await?;
    // The core's one test: the strict safetensors test wins over the
    // one-byte legacy pickle test.
    match sniff_format(&head, len) {
        Some(Sniffed::Tensorizer) => {
            return open_tensorizer(src, head, limits).await.map(Opened::Tensorizer);
        }
        Some(Sniffed::TorchZip | Sniffed::LegacyTorch) => {
            return torch::open(src, &head).await.map(|i| Opened::Torch(Box::new(i)));
        }
        Some(Sniffed::Safetensors { header_len: n }) => {
            let at = safetensors::PREFIX_LEN;
            let json = match head.get(at as usize..(at + n) as usize) {
                Some(j) => j.to_vec(),
                None => read_exact(src, at, n, "the safetensors header").await?,
            };
            return safetensors::summarize(&json, "", len)
                .map(|s| Opened::Safetensors(Box::new(s)));
        }
        None if head.starts_with(tensorizer_core::gguf::MAGIC) => {
            return gguf::open(src, head).await.map(|s| Opened::Gguf(Box::new(s)));
        }
        None => {}
    }
    if len < MAGIC.len() as u64 && MAGIC.starts_with(&head) {
        return Err(tensorizer_core::Error::Truncated {
            offset: len,
            needed: MAGIC.len() as u64 - len,
        }
        .into());
    }
    Err(ValidateError::invalid(
        Some(0),
        "not a tensorizer, safetensors, torch.save or GGUF file: its first bytes match none of them (at byte 0)",
    ))
}

async fn open_tensorizer<S: AsyncSource>(
    src: &mut S,
    head: Vec<u8>,
    limits: &ParseLimits,
) -> Result<Inspection, ValidateError> {
    let len = src.len();
    let header = parse_header(&head[..header_read_len(len).min(head.len())], len)?;
    if header.metadata_len > MAX_INDEX_BYTES {
        return Err(ValidateError::invalid(
            Some(METADATA_OFFSET),
            format!(
                "at byte 65: the metadata index is {} bytes, above the inspector's limit of {MAX_INDEX_BYTES}",
                header.metadata_len
            ),
        ));
    }
    // parse_header checked the index lies inside the file.
    let end = METADATA_OFFSET + header.metadata_len;
    let index = if end <= head.len() as u64 {
        head[METADATA_OFFSET as usize..end as usize].to_vec()
    } else {
        let have = head.len() as u64;
        let mut index = zeroed(header.metadata_len, METADATA_OFFSET, "the metadata index")?;
        let first = (have - METADATA_OFFSET) as usize;
        index[..first].copy_from_slice(&head[METADATA_OFFSET as usize..]);
        let rest = read_exact(src, have, end - have, "the metadata index").await?;
        index[first..].copy_from_slice(&rest);
        index
    };
    drop(head);
    parse_index(header, &index, len, limits)
}

impl Opened {
    /// The format's name: `tensorizer`, `safetensors`, `torch` or `gguf`.
    pub fn format(&self) -> &'static str {
        match self {
            Self::Tensorizer(_) => "tensorizer",
            Self::Safetensors(s) | Self::Gguf(s) => s.format,
            Self::Torch(_) => "torch",
        }
    }

    /// The summary the page shows, for a file named `file`.
    pub fn summary(&self, file: &str) -> Summary {
        match self {
            Self::Tensorizer(i) => tensorizer_summary(i, file),
            Self::Safetensors(s) | Self::Gguf(s) => {
                Summary { file: file.to_string(), ..(**s).clone() }
            }
            Self::Torch(t) => t.summary(file),
        }
    }
}

fn tensorizer_summary(ins: &Inspection, file: &str) -> Summary {
    let h = &ins.header;
    // Formatting a dtype or tensor type is done once per distinct value:
    // files with many tensors repeat a handful of them.
    let mut dtypes: Vec<(&tensorizer_core::Dtype, Shared, Shared)> = Vec::new();
    let mut kinds: Vec<(tensorizer_core::TensorType, Shared)> = Vec::new();
    let mut rows = Vec::with_capacity(ins.metadata.entries.len());
    for (index, e) in ins.metadata.entries.iter().enumerate() {
        let d = match dtypes.iter().position(|(d, ..)| *d == &e.dtype) {
            Some(i) => i,
            None => {
                dtypes.push((&e.dtype, e.dtype.to_string().into(), e.dtype.as_str().into()));
                dtypes.len() - 1
            }
        };
        let k = match kinds.iter().position(|(k, _)| *k == e.tensor_type) {
            Some(i) => i,
            None => {
                kinds.push((e.tensor_type, e.tensor_type.to_string().into()));
                kinds.len() - 1
            }
        };
        let (name, path) = name_and_path(&e.path);
        rows.push(Row {
            index,
            name,
            path,
            dtype: dtypes[d].1.clone(),
            dtype_string: dtypes[d].2.clone(),
            shape: e.shape.clone(),
            bytes: e.nbytes(),
            data_offset: Some(e.data_offset),
            data_length: e.data_length,
            kind: kinds[k].1.clone(),
            meta: e.is_meta(),
        });
    }
    // The header's facts as every report states them (the core's summary);
    // the labels are the page's.
    let s = HeaderSummary::of(h, rows.len(), ins.file_len);
    let header = vec![
        field("data version", s.data_version),
        field("feature flags", format!("{:#04x}", s.feature_flags)),
        field("versioned headers", s.versioned_headers),
        field("metadata index bytes", s.metadata_index_bytes),
    ];
    Summary {
        summary_version: super::summary::SUMMARY_VERSION,
        format: "tensorizer",
        file: file.to_string(),
        file_bytes: s.file_bytes,
        header,
        encrypted: s.encrypted,
        tensor_count: rows.len(),
        data_bytes: s.data_bytes,
        totals: totals(&rows, |r| top_module(&ins.metadata.entries[r.index].path)),
        tensors: rows,
        verify: if s.encrypted {
            "decrypts every tensor (a key file or passphrase is needed) and checks its MACs and stored CRC-32/SHA-256"
        } else {
            "checks every tensor's stored CRC-32 and SHA-256"
        },
        reads: 0,
        bytes_read: 0,
    }
}
