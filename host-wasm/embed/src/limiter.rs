//! The store's resource limiter: wasmtime's [`StoreLimits`], plus a note of
//! whether it ever refused linear memory, so that a run that fails for want of
//! memory can be told apart from one that fails on its input.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// [`StoreLimits`] that remembers a refusal.
pub(crate) struct Limiter {
    inner: StoreLimits,
    /// Set when a `memory.grow` (or the initial memory at instantiation) was
    /// refused or failed.
    pub(crate) memory_refused: bool,
}

impl Limiter {
    /// One instance, one memory, `memory_bytes` of linear memory in all.
    /// `memory.grow` beyond the limit returns -1 to the guest (the validator
    /// then reports exit 3); it does not trap.
    pub(crate) fn new(memory_bytes: usize) -> Self {
        let inner = StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .instances(1)
            .memories(1)
            .tables(4)
            .table_elements(100_000)
            .trap_on_grow_failure(false)
            .build();
        Self { inner, memory_refused: false }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.inner.memory_growing(current, desired, maximum)?;
        if !allowed {
            self.memory_refused = true;
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_refused = true;
        self.inner.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}
