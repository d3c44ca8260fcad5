//! One load's bookkeeping behind `TensorDeserializer.receipt` (spec §18.7):
//! which tensors are loaded, checked and failed, and the bytes read. The
//! loader reports what it did; nothing here reads tensor data, except that
//! a receipt asks the open reader which checked tensors had anything to
//! check them by.

use std::collections::{BTreeSet, HashSet};

use tensorizer_native::Result;

use crate::reader::NativeReader;

/// What a receipt lists, by file index: loaded, verified, failed, and the
/// bytes read by source name.
pub(crate) type Counts = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<(&'static str, u64)>);

pub(crate) struct Book {
    loaded: HashSet<usize>,
    verified: HashSet<usize>,
    /// Loaded with verification; whether anything was there to check is
    /// looked up (header reads) only when a receipt is made while the
    /// reader is open: never on the load path, never at close.
    checked: BTreeSet<usize>,
    failed: HashSet<usize>,
    mmap_bytes: u64,
    origin: &'static str,
    /// The reader's count when it was closed (or at the last receipt).
    read: u64,
    /// Bytes read by `resolve_checked`, not by loads.
    own: u64,
}

impl Book {
    pub(crate) fn new(origin: &'static str) -> Self {
        Self {
            loaded: HashSet::new(),
            verified: HashSet::new(),
            checked: BTreeSet::new(),
            failed: HashSet::new(),
            mmap_bytes: 0,
            origin,
            read: 0,
            own: 0,
        }
    }

    /// `indices` are loaded; with `verified`, they were checked against
    /// whatever the file stores for them.
    pub(crate) fn loaded(&mut self, indices: &[usize], verified: bool) {
        for &i in indices {
            self.loaded.insert(i);
            self.failed.remove(&i);
            if verified && !self.verified.contains(&i) {
                self.checked.insert(i);
            }
        }
    }

    pub(crate) fn failed(&mut self, indices: &[usize]) {
        self.failed.extend(indices.iter().filter(|i| !self.loaded.contains(i)));
    }

    /// A failed batch is retried one tensor at a time: only those that
    /// fail on their own stay failed.
    pub(crate) fn forget_failed(&mut self, indices: &[usize]) {
        for i in indices {
            self.failed.remove(i);
        }
    }

    pub(crate) fn mapped(&mut self, bytes: u64) {
        self.mmap_bytes = self.mmap_bytes.saturating_add(bytes);
    }

    pub(crate) fn closing(&mut self, reader: &NativeReader) {
        self.read = reader.inner.source().bytes();
    }

    /// Sorts the tensors loaded with verification into verified (their file
    /// stores hashes or MACs) and not.
    fn resolve_checked(&mut self, reader: &NativeReader) -> Result<()> {
        if self.checked.is_empty() {
            return Ok(());
        }
        let indices: Vec<usize> = self.checked.iter().copied().collect();
        let before = reader.inner.source().bytes();
        let records = reader.inner.records(&indices)?;
        self.own += reader.inner.source().bytes() - before;
        self.verified
            .extend(indices.iter().zip(&records).filter(|(_, r)| r.vouched()).map(|p| *p.0));
        self.checked.clear();
        Ok(())
    }

    /// The counts now; `reader` the open reader, or None after close.
    /// After close, tensors loaded with verification that were never looked
    /// up count as verified: their check ran and passed; only a header
    /// storing no hashes (no known writer writes one) would make that check
    /// empty, and telling needs the header read again.
    pub(crate) fn counts(&mut self, reader: Option<&NativeReader>) -> Result<Counts> {
        if let Some(reader) = reader {
            self.resolve_checked(reader)?;
            self.read = reader.inner.source().bytes();
        }
        let sorted = |set: &HashSet<usize>| {
            let mut v: Vec<usize> = set.iter().copied().collect();
            v.sort_unstable();
            v
        };
        let verified: Vec<usize> = sorted(&self.verified)
            .into_iter()
            .chain(self.checked.iter().copied())
            .filter(|i| self.loaded.contains(i))
            .collect();
        let mut sources = vec![(self.origin, self.read.saturating_sub(self.own))];
        if self.mmap_bytes > 0 {
            sources.push(("mmap", self.mmap_bytes));
        }
        Ok((sorted(&self.loaded), verified, sorted(&self.failed), sources))
    }
}
