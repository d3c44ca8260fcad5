//! Loading into device memory: the staging pipeline that reads, decrypts
//! and verifies a file's tensors through a ring of host buffers
//! ([`staging`]), and the CUDA engine that copies them to the GPU
//! (`cuda`, feature `cuda`).

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod staging;
