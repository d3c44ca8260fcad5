//! Slices: the index arithmetic and span plans against a naive element by
//! element model (proptests), tensorizer files plain and encrypted (only
//! the covering chunks are read and each is authenticated), torch
//! checkpoints from the committed vectors, and a slice over HTTP.

use std::ops::Range;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tensorizer_core::checkpoint::Leaf;
use tensorizer_core::crypto::Key;
use tensorizer_core::{Dtype, ElementType, KeySource, TensorSpec, WriterOptions};
use tensorizer_native::read::slice::plan::{
    Index, MAX_SPANS, SpanPolicy, StridedView, gather, plan_spans,
};
use tensorizer_native::source::Counted;
use tensorizer_native::{
    CheckpointReader, LocalFile, RangeSource, ReadOptions, Reader, WriteOptions, write_file,
};

use crate::servers::Nginx;

// ---- the naive model ----------------------------------------------------------

/// `view[index]` element by element: the result shape and each element's
/// storage position, row-major; `None` where indexing must fail.
fn naive(view: &StridedView, index: &[Index]) -> Option<(Vec<u64>, Vec<u64>)> {
    let ndim = view.shape.len();
    let consuming =
        index.iter().filter(|i| matches!(i, Index::At(_) | Index::Range { .. })).count();
    if consuming > ndim || index.iter().filter(|i| matches!(i, Index::Ellipsis)).count() > 1 {
        return None;
    }
    let mut items = Vec::new();
    for &item in index {
        if item == Index::Ellipsis {
            items.extend(std::iter::repeat_n(Index::full(), ndim - consuming));
        } else {
            items.push(item);
        }
    }
    if !index.contains(&Index::Ellipsis) {
        items.extend(std::iter::repeat_n(Index::full(), ndim - consuming));
    }
    let mut fixed = view.offset;
    let mut axes: Vec<Vec<u64>> = Vec::new();
    let mut d = 0;
    for item in items {
        match item {
            Index::NewAxis => axes.push(vec![0]),
            Index::At(i) => {
                let n = view.shape[d] as i64;
                let p = if i < 0 { i + n } else { i };
                if p < 0 || p >= n {
                    return None;
                }
                fixed += p as u64 * view.stride[d];
                d += 1;
            }
            Index::Range { start, stop, step } => {
                if step < 1 {
                    return None;
                }
                let n = view.shape[d] as i64;
                let bound = |v: Option<i64>, default: i64| {
                    v.map_or(default, |v| if v < 0 { (v + n).max(0) } else { v.min(n) })
                };
                let positions = (bound(start, 0)..bound(stop, n)).step_by(step as usize);
                axes.push(positions.map(|p| p as u64 * view.stride[d]).collect());
                d += 1;
            }
            Index::Ellipsis => unreachable!(),
        }
    }
    let shape: Vec<u64> = axes.iter().map(|a| a.len() as u64).collect();
    let mut elements = vec![fixed];
    for axis in &axes {
        elements = elements.iter().flat_map(|&e| axis.iter().map(move |&a| e + a)).collect();
    }
    Some((shape, elements))
}

/// The bytes of `elements` of `itemsize` from `storage`, back to back.
fn pick(storage: &[u8], elements: &[u64], itemsize: u64) -> Vec<u8> {
    let s = itemsize as usize;
    elements
        .iter()
        .flat_map(|&e| storage[e as usize * s..(e as usize + 1) * s].iter().copied())
        .collect()
}

/// The union of the elements' byte intervals, merged where they touch.
fn union(elements: &[u64], itemsize: u64) -> Vec<Range<u64>> {
    let mut starts: Vec<u64> = elements.iter().map(|e| e * itemsize).collect();
    starts.sort_unstable();
    let mut out: Vec<Range<u64>> = Vec::new();
    for s in starts {
        match out.last_mut() {
            Some(last) if s <= last.end => last.end = last.end.max(s + itemsize),
            _ => out.push(s..s + itemsize),
        }
    }
    out
}

/// Reads `view[index]` through a plan and a gather over `storage`.
fn through_plan(
    view: &StridedView,
    index: &[Index],
    itemsize: u64,
    policy: SpanPolicy,
    storage: &[u8],
) -> Option<Vec<u8>> {
    let sliced = view.index(index).ok()?;
    let spans = plan_spans(&sliced, itemsize, policy).unwrap();
    let data: Vec<u8> = spans
        .iter()
        .flat_map(|s| storage[s.start as usize..s.end as usize].iter().copied())
        .collect();
    let mut out = vec![0u8; (sliced.numel().unwrap() * itemsize) as usize];
    gather(&sliced, itemsize, &spans, &data, &mut out).unwrap();
    Some(out)
}

fn index_item(max: i64) -> impl Strategy<Value = Index> {
    prop_oneof![
        (-max - 1..=max).prop_map(Index::At),
        (
            proptest::option::of(-max - 2..=max + 2),
            proptest::option::of(-max - 2..=max + 2),
            prop_oneof![Just(1i64), 1i64..4, Just(i64::MAX)]
        )
            .prop_map(|(start, stop, step)| Index::Range { start, stop, step }),
        Just(Index::Ellipsis),
        Just(Index::NewAxis),
    ]
}

fn strided_view() -> impl Strategy<Value = StridedView> {
    proptest::collection::vec((0u64..6, 0u64..12), 0..4).prop_flat_map(|dims| {
        let shape: Vec<u64> = dims.iter().map(|d| d.0).collect();
        let stride: Vec<u64> = dims.iter().map(|d| d.1).collect();
        (0u64..6).prop_map(move |offset| StridedView {
            shape: shape.clone(),
            stride: stride.clone(),
            offset,
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn slices_match_the_naive_model(
        view in strided_view(),
        index in proptest::collection::vec(index_item(7), 0..5),
        itemsize in prop_oneof![Just(1u64), Just(2), Just(4), Just(8)],
        gap in prop_oneof![Just(0u64), 0u64..64],
        max_spans in prop_oneof![Just(MAX_SPANS), 1usize..4],
    ) {
        let want = naive(&view, &index);
        let got = view.index(&index);
        prop_assert_eq!(want.is_none(), got.is_err(), "{:?}", got);
        let Some((shape, elements)) = want else { return Ok(()) };
        let sliced = got.unwrap();
        prop_assert_eq!(&sliced.shape, &shape);
        // A storage long enough for every element, each byte distinct-ish.
        let extent = elements.iter().max().map_or(0, |e| e + 1) + view.offset + 1;
        let storage: Vec<u8> = (0..extent * itemsize).map(|b| (b * 7 + b / 251) as u8).collect();
        let policy = SpanPolicy { gap, max_spans };
        let read = through_plan(&view, &index, itemsize, policy, &storage).unwrap();
        prop_assert_eq!(read, pick(&storage, &elements, itemsize));
        // Spans: sorted, further apart than the gap, cover every element
        // and, with no gap and no cap, exactly the elements' bytes.
        let spans = plan_spans(&sliced, itemsize, policy).unwrap();
        prop_assert!(spans.len() <= max_spans);
        prop_assert!(spans.windows(2).all(|w| w[1].start > w[0].end + gap));
        let exact = union(&elements, itemsize);
        for e in &exact {
            prop_assert!(spans.iter().any(|s| s.start <= e.start && e.end <= s.end));
        }
        if gap == 0 && max_spans == MAX_SPANS {
            prop_assert_eq!(spans, exact);
        }
    }
}

#[test]
fn row_slices_of_contiguous_tensors_are_one_exact_span() {
    let view = StridedView::contiguous(&[100, 30, 7]).unwrap();
    for (index, want) in [
        (vec![Index::range(10, 20)], 10 * 30 * 7 * 2..20 * 30 * 7 * 2),
        (vec![Index::At(-1), Index::range(3, 5)], (99 * 30 + 3) * 7 * 2..(99 * 30 + 5) * 7 * 2),
        (
            vec![Index::At(4), Index::At(2), Index::range(1, 3)],
            ((4 * 30 + 2) * 7 + 1) * 2..((4 * 30 + 2) * 7 + 3) * 2,
        ),
    ] {
        let sliced = view.index(&index).unwrap();
        assert!(sliced.is_row_major());
        assert_eq!(plan_spans(&sliced, 2, SpanPolicy::REMOTE).unwrap(), vec![want]);
    }
}

// ---- tensorizer files ---------------------------------------------------------

const ROWS: u64 = 1000;
const COLS: u64 = 3000;

/// A 12 MB f32 matrix (six 2 MiB encryption chunks) and a small tensor.
fn matrix_file(dir: &Path, encrypted: bool) -> (PathBuf, Vec<u8>, Option<Key>) {
    let data: Vec<u8> =
        (0..ROWS * COLS * 4).map(|b| (b.wrapping_mul(2654435761) >> 11) as u8).collect();
    let small: Vec<u8> = (0..24u8).collect();
    let specs = [
        TensorSpec::state_dict("small", Dtype::from_element(ElementType::I16), vec![3, 4]),
        TensorSpec::state_dict("m", Dtype::from_element(ElementType::F32), vec![ROWS, COLS]),
    ];
    let key = Key::from_bytes([9; 32]);
    let options = WriteOptions {
        layout: WriterOptions { encryption: encrypted.then_some(None), ..WriterOptions::default() },
        key: encrypted.then(|| key.clone()),
        num_writers: 2,
    };
    let path = dir.join(format!("m{encrypted}.tensors"));
    write_file(
        &path,
        &[(specs[0].clone(), small.as_slice()), (specs[1].clone(), data.as_slice())],
        &options,
    )
    .unwrap();
    (path, data, encrypted.then_some(key))
}

fn open_counted(path: &Path, key: Option<&Key>) -> Reader<Counted<LocalFile>> {
    let options = ReadOptions {
        num_readers: 3,
        verify_hash: false,
        key: key.map(|k| KeySource::Key(k.clone())),
    };
    Reader::new(Counted::new(LocalFile::open(path).unwrap()), options).unwrap()
}

fn read_slice<S: RangeSource>(reader: &Reader<S>, i: usize, index: &[Index]) -> Vec<u8> {
    let view = reader.slice_view(i, index).unwrap();
    let itemsize = u64::from(reader.entries()[i].dtype.itemsize());
    let mut out = vec![0xAA; (view.numel().unwrap() * itemsize) as usize];
    reader.read_slice(i, index, &mut out).unwrap();
    out
}

fn matrix_indexes() -> Vec<Vec<Index>> {
    vec![
        vec![Index::range(400, 410)],
        vec![Index::Ellipsis, Index::range(5, 7)],
        vec![
            Index::Range { start: Some(-3), stop: None, step: 1 },
            Index::Range { start: None, stop: None, step: 500 },
        ],
        vec![Index::At(-1)],
        vec![Index::At(2), Index::At(-7)],
        vec![Index::range(7, 7)],
        vec![Index::NewAxis, Index::Range { start: Some(999), stop: Some(2000), step: 1 }],
        vec![],
    ]
}

#[test]
fn tensorizer_slices_equal_the_full_tensor_indexed() {
    let dir = tempfile::tempdir().unwrap();
    for encrypted in [false, true] {
        let (path, data, key) = matrix_file(dir.path(), encrypted);
        let reader = open_counted(&path, key.as_ref());
        let full = StridedView::contiguous(&[ROWS, COLS]).unwrap();
        for index in matrix_indexes() {
            let (_, elements) = naive(&full, &index).unwrap();
            assert!(
                read_slice(&reader, 1, &index) == pick(&data, &elements, 4),
                "{encrypted} {index:?}"
            );
        }
        assert_eq!(
            read_slice(&reader, 0, &[Index::At(1), Index::range(1, 3)]),
            vec![10, 11, 12, 13]
        );
        // Byte ranges, including ones crossing chunk boundaries.
        for range in [
            0..1,
            5..(2 << 20) + 3,
            (4 << 20) - 1..(4 << 20) + 1,
            12_000_000 - 9..12_000_000,
            77..77,
        ] {
            let mut out = vec![0u8; (range.end - range.start) as usize];
            reader.read_tensor_range(1, range.clone(), &mut out).unwrap();
            assert!(out == data[range.start as usize..range.end as usize], "{encrypted} {range:?}");
        }
        assert!(reader.read_tensor_range(1, 0..12_000_001, &mut vec![0u8; 12_000_001]).is_err());
        assert!(reader.read_slice(1, &[Index::At(1000)], &mut vec![0u8; 12_000]).is_err());
        assert!(reader.read_slice(1, &[Index::At(1)], &mut [0u8; 11]).is_err());
        reader.verify_tensor(1).unwrap();
    }
}

#[test]
fn a_slice_reads_only_its_bytes_or_its_chunks() {
    let dir = tempfile::tempdir().unwrap();
    for encrypted in [false, true] {
        let (path, _, key) = matrix_file(dir.path(), encrypted);
        let reader = open_counted(&path, key.as_ref());
        let header = reader.entries()[1].header_len();
        // Rows 400..410: bytes [4_800_000, 4_920_000), inside chunk 2.
        let before = reader.source().bytes();
        read_slice(&reader, 1, &[Index::range(400, 410)]);
        let read = reader.source().bytes() - before;
        let want = if encrypted { 2 << 20 } else { 10 * COLS * 4 };
        assert_eq!(read, header + want, "encrypted: {encrypted}");
        // Rows 500..600 cross from chunk 2 into chunk 3: two chunks.
        let before = reader.source().bytes();
        read_slice(&reader, 1, &[Index::range(500, 600)]);
        let want = if encrypted { 2 * (2 << 20) } else { 100 * COLS * 4 };
        assert_eq!(reader.source().bytes() - before, header + want, "encrypted: {encrypted}");
    }
}

#[test]
fn encrypted_slices_authenticate_every_chunk_they_read() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data, key) = matrix_file(dir.path(), true);
    let offset = Reader::open(&path, ReadOptions::default()).unwrap().entries()[1].data_offset;
    // Flip one ciphertext byte in chunk 4.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(offset + (8 << 20) + 100) as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let reader = open_counted(&path, key.as_ref());
    let row = |r: i64| vec![Index::At(r)];
    // Row 100 is in chunk 0: fine. Row 700 (byte 8_400_000) is in chunk 4: refused.
    let full = StridedView::contiguous(&[ROWS, COLS]).unwrap();
    let (_, elements) = naive(&full, &row(100)).unwrap();
    assert!(read_slice(&reader, 1, &row(100)) == pick(&data, &elements, 4));
    let err = reader.read_slice(1, &row(700), &mut vec![0u8; (COLS * 4) as usize]).unwrap_err();
    assert!(err.is_verification_failure(), "{err}");
}

#[test]
fn verify_tensor_checks_the_whole_tensor_a_slice_skips() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data, _) = matrix_file(dir.path(), false);
    let offset = Reader::open(&path, ReadOptions::default()).unwrap().entries()[1].data_offset;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(offset + 11_000_000) as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let reader = open_counted(&path, None);
    let full = StridedView::contiguous(&[ROWS, COLS]).unwrap();
    let (_, elements) = naive(&full, &[Index::At(3)]).unwrap();
    assert!(read_slice(&reader, 1, &[Index::At(3)]) == pick(&data, &elements, 4));
    assert!(reader.verify_tensor(1).unwrap_err().is_verification_failure());
    reader.verify_tensor(0).unwrap();
}

#[test]
fn slices_over_http_read_only_their_spans() {
    let dir = tempfile::tempdir().unwrap();
    let (_, data, _) = matrix_file(dir.path(), false);
    let (_, _, key) = matrix_file(dir.path(), true);
    let Some(nginx) = Nginx::serve(dir.path()) else { return };
    for (file, key) in [("mfalse.tensors", None), ("mtrue.tensors", key.as_ref())] {
        let source =
            tensorizer_native::open_uri(&nginx.url(file), tensorizer_native::Intent::ReadAll)
                .unwrap();
        let options = ReadOptions {
            num_readers: 4,
            verify_hash: false,
            key: key.map(|k| KeySource::Key(k.clone())),
        };
        let reader = Reader::new(Counted::new(source), options).unwrap();
        let full = StridedView::contiguous(&[ROWS, COLS]).unwrap();
        for index in matrix_indexes() {
            let (_, elements) = naive(&full, &index).unwrap();
            assert!(
                read_slice(&reader, 1, &index) == pick(&data, &elements, 4),
                "{file} {index:?}"
            );
        }
        let before = (reader.source().bytes(), reader.source().requests());
        read_slice(&reader, 1, &[Index::range(10, 20)]);
        let header = reader.entries()[1].header_len();
        let want = if key.is_some() { 2 << 20 } else { 10 * COLS * 4 };
        assert_eq!(reader.source().bytes() - before.0, header + want, "{file}");
        assert_eq!(reader.source().requests() - before.1, 2, "{file}: the header, then the rows");
    }
}

// ---- torch checkpoints ----------------------------------------------------------

fn torch_vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/torch")
}

fn checkpoint_indexes(ndim: usize) -> Vec<Vec<Index>> {
    let mut out = vec![
        vec![],
        vec![Index::Ellipsis],
        vec![Index::NewAxis],
        vec![Index::At(0)],
        vec![Index::At(-1)],
        vec![Index::range(1, 3)],
        vec![Index::Range { start: None, stop: None, step: 2 }],
        vec![Index::Range { start: Some(-2), stop: None, step: 1 }],
        vec![Index::range(2, 2)],
    ];
    if ndim >= 2 {
        out.push(vec![Index::Ellipsis, Index::range(1, 3)]);
        out.push(vec![Index::full(), Index::At(-1)]);
        out.push(vec![
            Index::Range { start: Some(1), stop: None, step: 2 },
            Index::Range { start: None, stop: Some(-1), step: 3 },
        ]);
    }
    if ndim >= 3 {
        out.push(vec![Index::At(0), Index::Ellipsis, Index::At(1)]);
        out.push(vec![
            Index::full(),
            Index::range(0, 1),
            Index::NewAxis,
            Index::Range { start: None, stop: None, step: 2 },
        ]);
    }
    out
}

#[test]
fn checkpoint_slices_equal_the_whole_tensor_indexed() {
    let mut checked = 0;
    for name in ["views.pt", "dtypes.pt", "big_endian.pt", "nested.pt", "params.pt", "module.pt"] {
        let reader = CheckpointReader::open(torch_vectors().join(name)).unwrap();
        for (i, entry) in reader.entries().iter().enumerate() {
            let Leaf::Tensor(view) = &entry.value else { continue };
            let itemsize = u64::from(view.dtype.size());
            let mut whole = vec![0u8; reader.nbytes(i).unwrap() as usize];
            reader.read_contiguous(i, &mut whole).unwrap();
            let contiguous = StridedView::contiguous(&view.shape).unwrap();
            for index in checkpoint_indexes(view.shape.len()) {
                let want = naive(&contiguous, &index);
                let got = reader.slice_view(i, &index);
                assert_eq!(want.is_none(), got.is_err(), "{name} {} {index:?}", entry.path);
                let Some((shape, elements)) = want else { continue };
                assert_eq!(got.unwrap().shape, shape);
                let mut out = vec![0xAAu8; elements.len() * itemsize as usize];
                reader.read_slice(i, &index, &mut out).unwrap();
                assert!(
                    out == pick(&whole, &elements, itemsize),
                    "{name} {} {index:?}",
                    entry.path
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn a_checkpoint_row_slice_reads_only_its_rows() {
    let reader = CheckpointReader::new(Counted::new(
        LocalFile::open(torch_vectors().join("views.pt")).unwrap(),
    ))
    .unwrap();
    // The largest contiguous tensor with at least 4 rows.
    let (i, view) = reader
        .entries()
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.value {
            Leaf::Tensor(v) if v.is_contiguous() && v.shape.len() >= 2 && v.shape[0] >= 4 => {
                Some((i, v.clone()))
            }
            _ => None,
        })
        .max_by_key(|(_, v)| v.numel())
        .expect("views.pt has a contiguous matrix");
    let row = view.shape[1..].iter().product::<u64>() * u64::from(view.dtype.size());
    reader.storage_range(view.storage).unwrap();
    let before = reader.source().bytes();
    let mut out = vec![0u8; (2 * row) as usize];
    reader.read_slice(i, &[Index::range(1, 3)], &mut out).unwrap();
    assert_eq!(reader.source().bytes() - before, 2 * row);
}
