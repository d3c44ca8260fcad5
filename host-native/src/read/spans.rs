//! Loading from sources where requests are expensive (HTTP, S3): the
//! requested tensors' headers and data are cut into one long span per
//! reader thread and each span is fetched with as few requests as the
//! layout allows, straight into header scratch space and the caller's
//! buffers. Decryption and hash checks follow, tensor by tensor.

use super::Reader;
use crate::error::Result;
use crate::parallel::for_each;
use crate::source::RangeSource;

/// Spans shorter than this are not split further between threads.
const MIN_SPAN: u64 = 4 << 20;

/// Bytes at a file offset, to be filled.
pub(super) struct Segment<'a> {
    pub(super) offset: u64,
    pub(super) buf: &'a mut [u8],
}

/// Consecutive segments, fetched with one vectored read.
struct Run<'a> {
    offset: u64,
    bufs: Vec<&'a mut [u8]>,
}

/// Cuts `segments` (in file order) into about `parts` groups of equal byte
/// count, splitting a segment where a boundary falls inside it, and merges
/// touching segments of a group into runs.
fn plan(segments: Vec<Segment<'_>>, parts: usize) -> Vec<Vec<Run<'_>>> {
    let total: u64 = segments.iter().map(|s| s.buf.len() as u64).sum();
    let target = total.div_ceil(parts.max(1) as u64).max(MIN_SPAN);
    let mut groups: Vec<Vec<Segment<'_>>> = vec![Vec::new()];
    let mut filled = 0u64;
    for mut seg in segments {
        while !seg.buf.is_empty() {
            if filled == target {
                groups.push(Vec::new());
                filled = 0;
            }
            let room = usize::try_from(target - filled).unwrap_or(usize::MAX);
            let take = room.min(seg.buf.len());
            let (head, tail) = std::mem::take(&mut seg.buf).split_at_mut(take);
            if let Some(g) = groups.last_mut() {
                g.push(Segment { offset: seg.offset, buf: head });
            }
            filled += take as u64;
            seg = Segment { offset: seg.offset + take as u64, buf: tail };
        }
    }
    groups
        .into_iter()
        .filter(|g| !g.is_empty())
        .map(|group| {
            let mut runs: Vec<Run<'_>> = Vec::new();
            for seg in group {
                match runs.last_mut() {
                    Some(run)
                        if run.offset + run.bufs.iter().map(|b| b.len() as u64).sum::<u64>()
                            == seg.offset =>
                    {
                        run.bufs.push(seg.buf);
                    }
                    _ => runs.push(Run { offset: seg.offset, bufs: vec![seg.buf] }),
                }
            }
            runs
        })
        .collect()
}

impl<S: RangeSource> Reader<S> {
    /// Loads `jobs` (sorted, buffer sizes checked) by handing every
    /// requested header and data range to `read` as segments, in job order,
    /// then checking, decrypting and verifying each tensor.
    pub(super) fn load_segments(
        &self,
        mut jobs: Vec<(usize, &mut [u8])>,
        verify: bool,
        read: impl FnOnce(Vec<Segment<'_>>) -> Result<()>,
    ) -> Result<()> {
        let entries = &self.metadata.entries;
        let mut headers: Vec<Vec<u8>> =
            jobs.iter().map(|(i, _)| vec![0u8; entries[*i].header_len() as usize]).collect();
        {
            let mut segments = Vec::with_capacity(jobs.len() * 2);
            for ((i, out), header) in jobs.iter_mut().zip(headers.iter_mut()) {
                let e = &entries[*i];
                segments.push(Segment { offset: e.header_offset, buf: header.as_mut_slice() });
                if !e.is_meta() {
                    // `out` is exactly `nbytes`, which equals the data length of a stored tensor.
                    segments.push(Segment { offset: e.data_offset, buf: &mut out[..] });
                }
            }
            read(segments)?;
        }
        let work: Vec<_> = jobs.into_iter().zip(&headers).collect();
        for_each(self.options.num_readers, work, |((i, out), raw)| {
            self.finish(&entries[i], raw, out, verify)
        })
    }

    /// [`Reader::load_many_with`] for sources that prefer long reads; `jobs`
    /// are sorted and their buffer sizes checked.
    pub(super) fn load_spans(&self, jobs: Vec<(usize, &mut [u8])>, verify: bool) -> Result<()> {
        self.load_segments(jobs, verify, |mut segments| {
            segments.sort_by_key(|s| s.offset);
            let threads = self.options.num_readers;
            for_each(threads, plan(segments, threads), |runs| {
                runs.into_iter().try_for_each(|mut run| {
                    run.bufs.iter_mut().for_each(|b| crate::memory::prefault(b));
                    self.source.read_vectored_at(run.offset, &mut run.bufs)
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_equal_spans_and_merges_touching_segments() {
        let mut a = vec![0u8; 6 << 20];
        let mut b = vec![0u8; 6 << 20];
        let mut c = vec![0u8; 4];
        let segments = vec![
            Segment { offset: 0, buf: &mut a },
            Segment { offset: 6 << 20, buf: &mut b },
            Segment { offset: 100 << 20, buf: &mut c },
        ];
        let groups = plan(segments, 2);
        let shape: Vec<Vec<(u64, Vec<usize>)>> = groups
            .iter()
            .map(|g| {
                g.iter().map(|r| (r.offset, r.bufs.iter().map(|b| b.len()).collect())).collect()
            })
            .collect();
        let half = (12 << 20) / 2 + 2;
        assert_eq!(
            shape,
            vec![
                vec![(0, vec![6 << 20, half - (6 << 20)])],
                vec![(half as u64, vec![(12 << 20) - half]), (100 << 20, vec![4])],
            ]
        );
    }
}
