//! Cold loads: the requested tensors' headers and data read around the
//! page cache ([`RangeSource::read_uncached_at`]) with many block-aligned
//! requests in flight. Data that sits at the same place in a block in
//! memory as in the file (the load plan places arena members and large
//! tensors so, `read::plan`) is read straight into its buffer; the rest
//! (headers, small tensors, the partial blocks at either end of a tensor,
//! data the plan could not place) goes through per-thread bounce buffers
//! of whole blocks. Decryption and hash checks follow, tensor by tensor.

use super::Reader;
use super::spans::Segment;
use super::turns::{QUEUE_DEPTH, Turn};
use crate::error::Result;
use crate::parallel::for_each_scratch;
use crate::source::{DIRECT_BLOCK, RangeSource, check_range};

/// Bytes per request read straight into a tensor.
const REQUEST: usize = 1 << 20;

/// A tensor's data at least this long, placed at its file phase, is read
/// straight into its buffer; shorter data is bounced. The load plan places
/// tensors from this size up, so the padding it adds (under one block
/// each) stays under 1/16 of their bytes.
pub(crate) const STRAIGHT_MIN: u64 = 64 << 10;

/// Longest bounced request.
const WINDOW_MAX: u64 = 1 << 20;

/// Pieces at most this far apart in the file are bounced by one request
/// (reading the gap costs less than a request of its own).
const WINDOW_GAP: u64 = 64 << 10;

/// Bounced pieces are cut to at most this many bytes, so that one fits a
/// window with the partial blocks at its ends.
const PIECE_MAX: usize = (WINDOW_MAX - 2 * DIRECT_BLOCK) as usize;

const BLOCK: usize = DIRECT_BLOCK as usize;

/// Loads of fewer bytes read through the cache: what a cold load saves on
/// them is less than starting the request threads costs.
const COLD_MIN: u64 = 16 << 20;

/// Whether a load of `bytes` is large enough to read around the cache.
pub(super) fn worth_it(bytes: u64) -> bool {
    bytes >= COLD_MIN
}

/// One request.
enum Request<'a> {
    /// Block-aligned bytes read straight into a block-aligned buffer.
    Straight(Segment<'a>),
    /// Blocks `offset..offset + len` read into a bounce buffer, then copied
    /// to each piece (its position inside the window, its buffer).
    Bounced { offset: u64, len: u64, pieces: Vec<(usize, &'a mut [u8])> },
}

impl Request<'_> {
    fn offset(&self) -> u64 {
        match self {
            Request::Straight(s) => s.offset,
            Request::Bounced { offset, .. } => *offset,
        }
    }
}

fn down(n: u64) -> u64 {
    n - n % DIRECT_BLOCK
}

/// Cuts `segments` into requests, in file order.
fn requests(segments: Vec<Segment<'_>>) -> Vec<Request<'_>> {
    let mut out = Vec::new();
    let mut loose: Vec<Segment<'_>> = Vec::new();
    for seg in segments {
        let len = seg.buf.len();
        let in_phase =
            (seg.buf.as_ptr() as u64).wrapping_sub(seg.offset).is_multiple_of(DIRECT_BLOCK);
        if in_phase && len as u64 >= STRAIGHT_MIN {
            // Less than a block up to the first boundary, so less than `len`.
            let head = ((DIRECT_BLOCK - seg.offset % DIRECT_BLOCK) % DIRECT_BLOCK) as usize;
            let body = (len - head) / BLOCK * BLOCK;
            let (h, rest) = seg.buf.split_at_mut(head);
            let (middle, t) = rest.split_at_mut(body);
            let start = seg.offset + head as u64;
            if !h.is_empty() {
                loose.push(Segment { offset: seg.offset, buf: h });
            }
            let mut at = start;
            for chunk in middle.chunks_mut(REQUEST) {
                let n = chunk.len() as u64;
                out.push(Request::Straight(Segment { offset: at, buf: chunk }));
                at += n;
            }
            if !t.is_empty() {
                loose.push(Segment { offset: start + body as u64, buf: t });
            }
        } else {
            let mut at = seg.offset;
            for chunk in seg.buf.chunks_mut(PIECE_MAX) {
                let n = chunk.len() as u64;
                loose.push(Segment { offset: at, buf: chunk });
                at += n;
            }
        }
    }
    loose.sort_by_key(|s| s.offset);
    let mut windows: Vec<Request<'_>> = Vec::new();
    for seg in loose {
        let start = down(seg.offset);
        let end = (seg.offset + seg.buf.len() as u64).next_multiple_of(DIRECT_BLOCK);
        if let Some(Request::Bounced { offset, len, pieces }) = windows.last_mut()
            && start <= *offset + *len + WINDOW_GAP
            && end - *offset <= WINDOW_MAX
        {
            *len = (*len).max(end - *offset);
            pieces.push(((seg.offset - *offset) as usize, seg.buf));
            continue;
        }
        windows.push(Request::Bounced {
            offset: start,
            len: end - start,
            pieces: vec![((seg.offset - start) as usize, seg.buf)],
        });
    }
    out.extend(windows);
    out.sort_by_key(Request::offset);
    out
}

/// Fills `segments` (each inside the source) by [`requests`] around the cache.
fn read_segments<S: RangeSource + ?Sized>(source: &S, segments: Vec<Segment<'_>>) -> Result<()> {
    for s in &segments {
        check_range(source.name(), source.len(), s.offset, s.buf.len())?;
    }
    run(source, requests(segments))
}

/// Carries out `requests` on up to [`QUEUE_DEPTH`] threads, each with a
/// bounce buffer of its own, in the process's one device queue
/// ([`Turn`]); the first error stops the rest.
fn run<S: RangeSource + ?Sized>(source: &S, requests: Vec<Request<'_>>) -> Result<()> {
    let turn = Turn::enter(requests.len());
    for_each_scratch(QUEUE_DEPTH, requests, |request, bounce: &mut Vec<u8>| {
        let _slot = turn.slot();
        serve(source, request, bounce)
    })
}

fn serve<S: RangeSource + ?Sized>(
    source: &S,
    request: Request<'_>,
    bounce: &mut Vec<u8>,
) -> Result<()> {
    match request {
        Request::Straight(seg) => source.read_uncached_at(seg.offset, seg.buf),
        Request::Bounced { offset, len, pieces } => {
            if bounce.is_empty() {
                *bounce = vec![0u8; WINDOW_MAX as usize + BLOCK];
            }
            let start = bounce.as_ptr().align_offset(BLOCK);
            // A window is at most WINDOW_MAX long.
            let window = &mut bounce[start..start + len as usize];
            source.read_uncached_at(offset, window)?;
            for (at, buf) in pieces {
                let n = buf.len();
                buf.copy_from_slice(&window[at..at + n]);
            }
            Ok(())
        }
    }
}

impl<S: RangeSource> Reader<S> {
    /// [`Reader::load_many_with`] for a cold local file; `jobs` are sorted
    /// and their buffer sizes checked.
    pub(super) fn load_cold(&self, jobs: Vec<(usize, &mut [u8])>, verify: bool) -> Result<()> {
        self.load_segments(jobs, verify, |segments| read_segments(&self.source, segments))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemorySource;

    /// A buffer of `len` bytes whose address is `phase` past a block boundary.
    fn placed(storage: &mut Vec<u8>, len: usize, phase: usize) -> &mut [u8] {
        *storage = vec![0u8; len + 2 * BLOCK];
        let start = storage.as_ptr().align_offset(BLOCK) + phase;
        &mut storage[start..start + len]
    }

    #[test]
    fn in_phase_data_goes_straight_and_the_rest_is_bounced() {
        let file: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 251) as u8).collect();
        let source = MemorySource::new(file.clone(), "mem");
        let (mut a, mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let big = placed(&mut a, (2 << 20) + 100, 100); // in phase with offset 100
        let off_phase = placed(&mut b, 200 << 10, 8); // offset 5000: out of phase
        let small = placed(&mut c, 10, 0);
        let tail = placed(&mut d, 4000, 0); // ends at the file's end
        let end = file.len() as u64;
        let segments = vec![
            Segment { offset: 100, buf: big },
            Segment { offset: (2 << 20) + 5000, buf: off_phase },
            Segment { offset: (2 << 20) + 300_000, buf: small },
            Segment { offset: end - 4000, buf: tail },
        ];
        let reqs = requests(segments);
        let straight = reqs.iter().filter(|r| matches!(r, Request::Straight(_))).count();
        assert_eq!(straight, 2, "the big tensor's aligned middle, in 1 MiB requests");
        assert!(reqs.windows(2).all(|w| w[0].offset() <= w[1].offset()));
        for r in &reqs {
            if let Request::Bounced { offset, len, .. } = r {
                assert!(
                    offset % DIRECT_BLOCK == 0 && len % DIRECT_BLOCK == 0 && *len <= WINDOW_MAX
                );
            }
        }
        run(&source, reqs).unwrap();
        let (big, off_phase) =
            (&a[a.as_ptr().align_offset(BLOCK) + 100..], &b[b.as_ptr().align_offset(BLOCK) + 8..]);
        assert_eq!(&big[..(2 << 20) + 100], &file[100..(2 << 20) + 200]);
        let o = (2 << 20) + 5000;
        assert_eq!(&off_phase[..200 << 10], &file[o..o + (200 << 10)]);
        let s = (2 << 20) + 300_000;
        assert_eq!(&c[c.as_ptr().align_offset(BLOCK)..][..10], &file[s..s + 10]);
        assert_eq!(&d[d.as_ptr().align_offset(BLOCK)..][..4000], &file[file.len() - 4000..]);
    }

    #[test]
    fn a_read_past_the_end_fails() {
        let source = MemorySource::new(vec![7u8; 10_000], "mem");
        let mut storage = Vec::new();
        let buf = placed(&mut storage, 100, 0);
        let err = read_segments(&source, vec![Segment { offset: 9_950, buf }]).unwrap_err();
        assert!(err.to_string().contains("mem"), "{err}");
    }
}
