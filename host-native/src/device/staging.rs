//! Loading tensors through a ring of staging buffers into memory that the
//! CPU does not write directly (GPU memory): reader threads fill `K`
//! buffers of `B` bytes with positioned reads, decrypt and hash in place,
//! and hand each buffer to a [`CopyEngine`], which copies it out
//! asynchronously and returns a ticket; a buffer is refilled only after its
//! ticket is waited for. Host memory stays at `K × B` bytes (plus one
//! parsed header per tensor) whatever the model size.
//!
//! Tensors longer than a buffer are split across buffers (at encryption
//! chunk boundaries); consecutive small tensors share one, read with one
//! request. Hashes are fed in data order, so pieces of one tensor that
//! different threads read are hashed one after another.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tensorizer_core::TensorRecord;
use tensorizer_core::crypto::Key;
use tensorizer_core::hash::TensorHasher;

use crate::error::{Error, Result};
use crate::parallel::for_each;
use crate::read::{Reader, decrypt_piece};
use crate::source::{DIRECT_BLOCK, RangeSource};

mod host;
mod plan;

pub use host::{HostBuffer, HostEngine, HostTicket};

/// Bytes per staging buffer for a local file (a multiple of the 2 MiB
/// encryption chunk, so encrypted tensors split evenly). Page-locked
/// memory is slow to make: on an H200 host a fresh process spent 0.7 ms
/// per MiB of it, so a ring of 18 × 16 MiB cost a 1 GiB first load 150 ms,
/// while 18 × 4 MiB moved bytes just as fast once made (spec §19.1).
pub const DEFAULT_BUFFER_LEN: usize = 4 << 20;

/// Bytes per staging buffer for a network source, where each request
/// costs a round trip (fewer, longer requests), and for a load that checks
/// hashes: a tensor's pieces are hashed one after another, so the ring's
/// buffers must span many tensors for many threads to hash at once (on
/// the H200 host, 1 GiB in 16 MiB tensors verified at 4.4 GB/s through
/// 4 MiB buffers and 8.6–10.2 GB/s through 16 MiB ones, spec §19.1).
pub const LONG_BUFFER_LEN: usize = 16 << 20;

/// Longest staging buffer a load grows to so that one encryption chunk
/// fits (files whose chunks are longer than [`StagingOptions::buffer_len`];
/// tensorizer writes 2 MiB chunks). A file claiming longer chunks is
/// refused rather than pinning what it claims.
pub const MAX_BUFFER_LEN: usize = 64 << 20;

/// How long a waiting thread sleeps before looking again whether another
/// thread failed (wake-ups normally come sooner, by notification).
const POLL: Duration = Duration::from_millis(20);

/// Sizes of the staging ring.
#[derive(Debug, Clone)]
pub struct StagingOptions {
    /// Number of staging buffers (`K`).
    pub buffers: usize,
    /// Bytes per staging buffer (`B`).
    pub buffer_len: usize,
    /// Reader threads; more than `buffers` only wait.
    pub threads: usize,
    /// Check every stored hash.
    pub verify_hash: bool,
}

impl StagingOptions {
    /// The ring for `reader`, checking hashes as its options say
    /// ([`StagingOptions::for_load`]).
    pub fn for_reader<S: RangeSource>(reader: &Reader<S>) -> Self {
        Self::for_load(reader, reader.options().verify_hash)
    }

    /// The ring for a load from `reader` that checks hashes or not: its
    /// thread count, two buffers more than threads, [`DEFAULT_BUFFER_LEN`]
    /// each ([`LONG_BUFFER_LEN`] for a network source or a verified load).
    pub fn for_load<S: RangeSource>(reader: &Reader<S>, verify_hash: bool) -> Self {
        let threads = reader.options().num_readers.max(1);
        let long = verify_hash || reader.source().prefers_long_reads();
        Self {
            buffers: threads + 2,
            buffer_len: if long { LONG_BUFFER_LEN } else { DEFAULT_BUFFER_LEN },
            threads,
            verify_hash,
        }
    }
}

/// One copy out of a staging buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    /// The bytes of the buffer to copy.
    pub src: Range<usize>,
    /// The destination: a position in the list of tensors being loaded.
    pub dst: usize,
    /// Where in the destination the bytes go.
    pub dst_offset: u64,
}

/// Moves staged bytes to their destinations, asynchronously.
pub trait CopyEngine: Sync {
    /// A staging buffer (page-locked host memory for a GPU).
    type Buffer: Send;
    /// Marks the completion of the copies out of one buffer.
    type Ticket: Send;

    /// Allocates a staging buffer of `len` bytes.
    fn alloc(&self, len: usize) -> Result<Self::Buffer>;

    /// The buffer's bytes, for reading into. Called only when no copy out
    /// of it is in flight.
    fn bytes_mut<'a>(&self, buffer: &'a mut Self::Buffer) -> Result<&'a mut [u8]>;

    /// Starts `copies` out of `buffer` (ring slot `slot`); the buffer is
    /// not touched again until the returned ticket is waited for.
    fn copy_async(
        &self,
        slot: usize,
        buffer: &Self::Buffer,
        copies: &[Copy],
    ) -> Result<Self::Ticket>;

    /// Fills the first `len` bytes of destination `dst` with zeros (meta
    /// tensors).
    fn zero(&self, dst: usize, len: u64) -> Result<()>;

    /// Blocks until the copies behind `ticket` are complete.
    fn wait(&self, ticket: Self::Ticket) -> Result<()>;
}

/// A ring slot: its buffer (absent while a thread fills it), the ticket of
/// the copies last started from it, and the fill number allowed in next.
struct Slot<B, T> {
    buffer: Option<B>,
    ticket: Option<T>,
    turn: usize,
}

/// A slot behind its lock, with the condition signalled when its turn
/// advances.
type RingSlot<E> = (Mutex<Slot<<E as CopyEngine>::Buffer, <E as CopyEngine>::Ticket>>, Condvar);

/// Hashing progress of one tensor: data bytes hashed so far, and the
/// hasher (absent while a thread feeds it).
struct Hashing {
    done: u64,
    hasher: Option<TensorHasher>,
}

/// Loads tensors `tensors` (indices into `reader.entries()`) through
/// `engine`: destination `j` receives tensor `tensors[j]`, exactly
/// [`tensorizer_core::MetadataEntry::nbytes`] bytes (meta tensors are
/// zero-filled). All copies are complete when this returns, on success or
/// error.
pub fn load_staged<S: RangeSource, E: CopyEngine>(
    reader: &Reader<S>,
    tensors: &[usize],
    engine: &E,
    options: &StagingOptions,
) -> Result<()> {
    let name = reader.source().name();
    if options.buffers == 0 || options.buffer_len == 0 {
        return Err(Error::Invalid(format!(
            "{name}: the staging ring needs at least one buffer of at least one byte"
        )));
    }
    if let Some(&bad) = tensors.iter().find(|&&i| i >= reader.entries().len()) {
        return Err(Error::Invalid(format!("{name}: no tensor number {bad}")));
    }
    let threads = options.threads.clamp(1, options.buffers);
    let records = read_records(reader, tensors, threads)?;
    let (keys, fills) = plan_fills(reader, tensors, &records, options.buffer_len)?;
    zero_unstored(reader, tensors, &records, engine, options.verify_hash)?;
    let hashing = records
        .iter()
        .map(|r| Hashing {
            done: 0,
            hasher: options.verify_hash.then(|| r.hasher_on(crate::kernels::digest::kernel())),
        })
        .collect();
    let mut run = Run {
        reader,
        tensors,
        records: &records,
        keys: &keys,
        fills: &fills,
        engine,
        verify: options.verify_hash,
        cold: reader.reads_cold(fills.iter().map(|f| f.len as u64).sum()),
        slots: Vec::new(),
        buffer_len: 0,
        hashing: Mutex::new(hashing),
        hashed: Condvar::new(),
        next_fill: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        first_error: Mutex::new(None),
    };
    run.make_ring(options.buffers);
    std::thread::scope(|scope| {
        for _ in 0..threads.min(fills.len()) {
            scope.spawn(|| run.work());
        }
    });
    run.finish()
}

/// The headers of `tensors`, read on `threads` threads (the plan needs
/// each tensor's encryption chunk size).
fn read_records<S: RangeSource>(
    reader: &Reader<S>,
    tensors: &[usize],
    threads: usize,
) -> Result<Vec<TensorRecord>> {
    let mut records: Vec<Option<TensorRecord>> = vec![None; tensors.len()];
    for_each(threads, records.iter_mut().zip(tensors).collect(), |(slot, &i)| {
        *slot = Some(reader.record(i)?);
        Ok(())
    })?;
    Ok(records.into_iter().flatten().collect())
}

/// Each tensor's key, and the fills of the staging buffers: a buffer holds
/// at least one encryption chunk of every tensor that needs more than one
/// buffer (up to MAX_BUFFER_LEN), and at least `buffer_len` bytes.
fn plan_fills<S: RangeSource>(
    reader: &Reader<S>,
    tensors: &[usize],
    records: &[TensorRecord],
    buffer_len: usize,
) -> Result<(Vec<Option<Key>>, Vec<plan::Fill>)> {
    let (name, entries) = (reader.source().name(), reader.entries());
    let mut keys: Vec<Option<Key>> = Vec::with_capacity(records.len());
    let mut wanted = Vec::with_capacity(records.len());
    for (dst, (record, &i)) in records.iter().zip(tensors).enumerate() {
        let entry = &entries[i];
        if !entry.is_meta() && entry.data_length != entry.nbytes() {
            return Err(Error::Invalid(format!(
                "{name}: tensor {:?} stores {} bytes for a {}-byte tensor",
                entry.path.to_string(),
                entry.data_length,
                entry.nbytes()
            )));
        }
        let cipher = record.cipher().map_err(|e| Error::tensor(name, entry.path.to_string(), e))?;
        keys.push(reader.key_for(record)?);
        wanted.push(plan::Wanted { dst, entry, unit: cipher.map_or(1, |c| c.chunk_size) });
    }
    let chunk = wanted
        .iter()
        .filter(|w| w.unit > 1)
        .map(|w| w.unit.min(w.entry.data_length))
        .filter(|&need| need <= MAX_BUFFER_LEN as u64)
        .max()
        .map_or(0, |need| need as usize);
    let fills = plan::plan(wanted, buffer_len.max(chunk), name)?;
    Ok((keys, fills))
}

/// Tensors without stored data: zero-filled, their hashes (with `verify`)
/// checked over nothing.
fn zero_unstored<S: RangeSource, E: CopyEngine>(
    reader: &Reader<S>,
    tensors: &[usize],
    records: &[TensorRecord],
    engine: &E,
    verify: bool,
) -> Result<()> {
    let name = reader.source().name();
    for (dst, (record, &i)) in records.iter().zip(tensors).enumerate() {
        let entry = &reader.entries()[i];
        if entry.data_length == 0 {
            if entry.nbytes() > 0 {
                engine.zero(dst, entry.nbytes())?;
            }
            if verify {
                record.verify(&[]).map_err(|e| Error::tensor(name, entry.path.to_string(), e))?;
            }
        }
    }
    Ok(())
}

/// The shared state of one load.
struct Run<'a, S: RangeSource, E: CopyEngine> {
    reader: &'a Reader<S>,
    tensors: &'a [usize],
    records: &'a [TensorRecord],
    keys: &'a [Option<Key>],
    fills: &'a [plan::Fill],
    engine: &'a E,
    verify: bool,
    /// Read with [`RangeSource::read_uncached_at`] (spec §23.1).
    cold: bool,
    slots: Vec<RingSlot<E>>,
    /// The length of every staging buffer.
    buffer_len: usize,
    hashing: Mutex<Vec<Hashing>>,
    hashed: Condvar,
    next_fill: AtomicUsize,
    failed: AtomicBool,
    first_error: Mutex<Option<Error>>,
}

/// Locks `m`, ignoring poisoning: the state is only ever left consistent
/// (a panicking thread ends the load through the scope anyway).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<S: RangeSource, E: CopyEngine> Run<'_, S, E> {
    /// The ring's slots: no more buffers than fills, none longer than the
    /// longest fill (a small load pins little memory). Each buffer is
    /// allocated by the thread that first fills it: page-locked memory is
    /// slow to make, and so the first read waits for one allocation, not
    /// for the whole ring. Reads around the page cache start and end on
    /// block boundaries: room for the block before a fill's start and the
    /// rest of its last block (warm loads too, so that pooled buffers
    /// serve either kind).
    fn make_ring(&mut self, buffers: usize) {
        let ring = buffers.min(self.fills.len().max(1));
        let longest = self.fills.iter().map(|f| f.len).max().unwrap_or(0).max(1);
        self.buffer_len = longest + 2 * DIRECT_BLOCK as usize;
        for k in 0..ring {
            let slot = Slot { buffer: None, ticket: None, turn: k };
            self.slots.push((Mutex::new(slot), Condvar::new()));
        }
    }

    /// The load's outcome, once every copy has finished: the buffers must
    /// outlive their copies, even after an error.
    fn finish(self) -> Result<()> {
        let mut result = match self.first_error.into_inner() {
            Ok(Some(e)) => Err(e),
            _ => Ok(()),
        };
        for (slot, _) in self.slots {
            let slot = slot.into_inner().unwrap_or_else(|p| p.into_inner());
            if let Some(ticket) = slot.ticket {
                let waited = self.engine.wait(ticket);
                if result.is_ok() {
                    result = waited;
                }
            }
        }
        result
    }

    /// One reader thread: takes fill numbers in order until none are left
    /// or a thread failed.
    fn work(&self) {
        while !self.failed.load(Ordering::Relaxed) {
            let n = self.next_fill.fetch_add(1, Ordering::Relaxed);
            if n >= self.fills.len() {
                break;
            }
            if let Err(e) = self.fill(n) {
                lock(&self.first_error).get_or_insert(e);
                self.failed.store(true, Ordering::Relaxed);
                self.hashed.notify_all();
                for (_, cv) in &self.slots {
                    cv.notify_all();
                }
                break;
            }
        }
    }

    fn tensor_err(&self, dst: usize) -> impl FnOnce(tensorizer_core::Error) -> Error + '_ {
        move |e| {
            let entry = &self.reader.entries()[self.tensors[dst]];
            Error::tensor(self.reader.source().name(), entry.path.to_string(), e)
        }
    }

    /// Fill number `n`: waits for its slot, waits for the copies last made
    /// from it, reads, decrypts and hashes, and starts the copies.
    fn fill(&self, n: usize) -> Result<()> {
        let k = n % self.slots.len();
        let (mutex, turned) = &self.slots[k];
        let (buffer, ticket) = {
            let mut slot = lock(mutex);
            while slot.turn != n {
                if self.failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                slot = turned.wait_timeout(slot, POLL).map_or_else(|p| p.into_inner().0, |r| r.0);
            }
            match slot.buffer.take() {
                Some(b) => (Some(b), slot.ticket.take()),
                None if n < self.slots.len() => (None, None),
                None => {
                    return Err(Error::Invalid(
                        "staging ring: buffer missing from its slot".into(),
                    ));
                }
            }
        };
        // The slot's first turn: its buffer is made here, outside the lock
        // (if that fails the slot stays empty, and the load stops).
        let mut buffer = match buffer {
            Some(b) => b,
            None => self.engine.alloc(self.buffer_len)?,
        };
        // Give the buffer back whatever happens, so the final wait sees
        // every ticket.
        let mut started = None;
        let outcome = (|| {
            if let Some(t) = ticket {
                self.engine.wait(t)?;
            }
            let fill = &self.fills[n];
            let bytes = self.engine.bytes_mut(&mut buffer)?;
            let have = bytes.len();
            // Where the fill's first byte lands in the buffer.
            let head = if self.cold { (fill.start % DIRECT_BLOCK) as usize } else { 0 };
            let short = || {
                Error::Invalid(format!(
                    "staging buffer of {have} bytes is shorter than a {}-byte fill",
                    fill.len
                ))
            };
            if self.cold {
                let span = (head + fill.len).next_multiple_of(DIRECT_BLOCK as usize);
                let window = bytes.get_mut(..span).ok_or_else(short)?;
                self.reader.source().read_uncached_at(fill.start - head as u64, window)?;
            } else {
                self.reader
                    .source()
                    .read_exact_at(fill.start, bytes.get_mut(..fill.len).ok_or_else(short)?)?;
            }
            let window = &mut bytes[head..head + fill.len];
            for seg in &fill.segments {
                self.finish_segment(seg, &mut window[seg.buf_at..seg.buf_at + seg.len])?;
            }
            let copies: Vec<Copy> = fill
                .segments
                .iter()
                .map(|s| Copy {
                    src: head + s.buf_at..head + s.buf_at + s.len,
                    dst: s.dst,
                    dst_offset: s.at,
                })
                .collect();
            started = Some(self.engine.copy_async(k, &buffer, &copies)?);
            Ok(())
        })();
        let mut slot = lock(mutex);
        slot.buffer = Some(buffer);
        slot.ticket = started;
        slot.turn = n + self.slots.len();
        drop(slot);
        turned.notify_all();
        outcome
    }

    /// Decrypts one piece in place and feeds it to its tensor's hasher in
    /// data order, checking the hashes after the last piece.
    fn finish_segment(&self, seg: &plan::Segment, piece: &mut [u8]) -> Result<()> {
        let record = &self.records[seg.dst];
        if let (Some(cipher), Some(key)) =
            (record.cipher().map_err(self.tensor_err(seg.dst))?, &self.keys[seg.dst])
        {
            decrypt_piece(&cipher, key, seg.at, piece).map_err(self.tensor_err(seg.dst))?;
        }
        if !self.verify {
            return Ok(());
        }
        let mut hasher = {
            let mut all = lock(&self.hashing);
            loop {
                if self.failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let h = &mut all[seg.dst];
                if h.done == seg.at
                    && let Some(hasher) = h.hasher.take()
                {
                    break hasher;
                }
                all =
                    self.hashed.wait_timeout(all, POLL).map_or_else(|p| p.into_inner().0, |r| r.0);
            }
        };
        hasher.update(piece);
        let end = seg.at + piece.len() as u64;
        let last = end == record.header.data_length;
        let (keep, finished) = if last { (None, Some(hasher)) } else { (Some(hasher), None) };
        lock(&self.hashing)[seg.dst] = Hashing { done: end, hasher: keep };
        self.hashed.notify_all();
        match finished {
            Some(h) => tensorizer_core::hash::verify(&record.header, &h.finish())
                .map_err(self.tensor_err(seg.dst)),
            None => Ok(()),
        }
    }
}
