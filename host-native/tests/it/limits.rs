//! The native host's limits on sizes taken from input, each exceeded by
//! one (or by one element): a typed refusal that names the limit, before
//! reading or allocating what the input claims. The format core's own
//! limits are swept in `format-core/tests/hostile.rs` and
//! `format-core/tests/it/checkpoint.rs`.

use std::sync::Arc;

use tensorizer_native::convert::checkpoint::{CheckpointReader, DEFAULT_MAX_EXPANDED_BYTES};
use tensorizer_native::convert::safetensors::{MAX_SAFETENSORS_HEADER, SafetensorsFile};
use tensorizer_native::convert::{ConvertOptions, DEFAULT_MIN_OUTPUT_BOUND, convert_source};
use tensorizer_native::source::Counted;
use tensorizer_native::{MemorySource, RangeSource, Result};

use crate::checkpoint::expanded_checkpoint_of;

/// A source of `len` bytes holding `parts` at their offsets and zeros
/// elsewhere: a file as large as a claim, without its bytes.
struct Sparse {
    parts: Vec<(u64, Vec<u8>)>,
    len: u64,
}

impl RangeSource for Sparse {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.fill(0);
        for (at, bytes) in &self.parts {
            for (i, b) in buf.iter_mut().enumerate() {
                let pos = offset + i as u64;
                if pos >= *at && pos < at + bytes.len() as u64 {
                    *b = bytes[(pos - at) as usize];
                }
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "sparse"
    }
}

#[test]
fn a_safetensors_header_one_byte_over_the_limit_is_refused_unread() {
    let n = MAX_SAFETENSORS_HEADER + 1;
    let head = [&n.to_le_bytes()[..], b"{"].concat();
    let source = Arc::new(Counted::new(Sparse { parts: vec![(0, head)], len: 8 + n + 16 }));
    let err = SafetensorsFile::new(Arc::clone(&source)).err().expect("refused");
    let text = err.to_string();
    assert!(text.contains("above the limit") && text.contains(&n.to_string()), "{text}");
    assert!(source.bytes() <= 8, "read {} bytes", source.bytes());
}

/// A zip whose only entry, `x/data.pkl`, claims `size` bytes (zeros).
fn pickle_claiming(size: u32) -> Sparse {
    let name = b"x/data.pkl";
    let mut local = 0x0403_4b50u32.to_le_bytes().to_vec();
    local.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    local.extend_from_slice(&size.to_le_bytes());
    local.extend_from_slice(&size.to_le_bytes());
    local.extend_from_slice(&(name.len() as u16).to_le_bytes());
    local.extend_from_slice(&[0, 0]);
    local.extend_from_slice(name);
    let cd_at = local.len() as u64 + u64::from(size);
    let mut cd = 0x0201_4b50u32.to_le_bytes().to_vec();
    cd.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    cd.extend_from_slice(&size.to_le_bytes());
    cd.extend_from_slice(&size.to_le_bytes());
    cd.extend_from_slice(&(name.len() as u16).to_le_bytes());
    cd.extend_from_slice(&[0; 12]);
    cd.extend_from_slice(&0u32.to_le_bytes());
    cd.extend_from_slice(name);
    let cd_len = cd.len() as u32;
    cd.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    cd.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
    cd.extend_from_slice(&cd_len.to_le_bytes());
    cd.extend_from_slice(&(cd_at as u32).to_le_bytes());
    cd.extend_from_slice(&[0, 0]);
    let len = cd_at + cd.len() as u64;
    Sparse { parts: vec![(0, local), (cd_at, cd)], len }
}

#[test]
fn a_pickle_one_byte_over_the_limit_is_refused_unread() {
    use tensorizer_core::layout::MAX_PICKLE_LEN;
    let source = Arc::new(Counted::new(pickle_claiming(MAX_PICKLE_LEN as u32 + 1)));
    let err = CheckpointReader::new(Arc::clone(&source)).err().expect("refused");
    let core = err.format_error().expect("a format error");
    let ok = matches!(core, tensorizer_core::Error::LimitExceeded { value, limit, .. }
        if *value == MAX_PICKLE_LEN + 1 && *limit == MAX_PICKLE_LEN);
    assert!(ok, "{err}");
    assert!(source.bytes() < 1 << 20, "read {} bytes", source.bytes());
}

#[test]
fn an_expanded_view_one_element_over_the_limit_is_refused() {
    let numel = (DEFAULT_MAX_EXPANDED_BYTES / 4 + 1) as u32;
    let reader =
        CheckpointReader::new(MemorySource::new(expanded_checkpoint_of(&[numel]), "x.pt")).unwrap();
    let err = reader.nbytes(0).unwrap_err();
    let ok = matches!(err.format_error(), Some(tensorizer_core::Error::LimitExceeded { value, limit, .. })
        if *value == DEFAULT_MAX_EXPANDED_BYTES + 4 && *limit == DEFAULT_MAX_EXPANDED_BYTES);
    assert!(ok, "{err}");
}

#[test]
fn a_conversion_one_element_over_its_output_bound_is_refused_before_writing() {
    // Two expanded views of 512 MiB and 512 MiB + 4 bytes from a file of a
    // few KB: the bound is DEFAULT_MIN_OUTPUT_BOUND (1 GiB). (At the bound
    // exactly a conversion goes ahead: `expanded_views_cannot_blow_a_small_
    // checkpoint_up_on_conversion`.)
    let half = (DEFAULT_MIN_OUTPUT_BOUND / 8) as u32;
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("out.tensors");
    let input = MemorySource::new(expanded_checkpoint_of(&[half, half + 1]), "x.pt");
    let err = convert_source(input, &dst, &ConvertOptions::default(), |_, _| Ok(()))
        .unwrap_err()
        .to_string();
    let want = format!("would write {} bytes", DEFAULT_MIN_OUTPUT_BOUND + 4);
    assert!(err.contains(&want) && err.contains("max_output_bytes = 1073741824"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing written");
}
