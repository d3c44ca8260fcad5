//! `cooperative_verdict`: what the ranks of a cooperative load learn from
//! their agreement (spec §24.3), decided once for every rank.

use pyo3::prelude::*;

/// One rank's part of the agreement: the digest of what it loads (None
/// when it failed before knowing), and its failure as (description,
/// tensor name or None).
type Part = (Option<String>, Option<(String, Py<PyAny>)>);

/// `CooperativeLoadError`'s arguments: message, rank, tensor.
type Verdict = (String, Option<usize>, Py<PyAny>);

/// Why the load fails on every rank, as `CooperativeLoadError`'s
/// (message, rank, tensor), or None when every rank succeeded and all
/// `everyone`'s digests are `digest`: the first rank that failed, else a
/// disagreement (rank None).
#[pyfunction]
pub(crate) fn cooperative_verdict(
    py: Python<'_>,
    everyone: Vec<Part>,
    digest: Option<String>,
) -> PyResult<Option<Verdict>> {
    for (rank, (_, failed)) in everyone.iter().enumerate() {
        if let Some((what, tensor)) = failed {
            let tensor = tensor.bind(py);
            let at = if tensor.is_none() {
                String::new()
            } else {
                format!(" at tensor {}", tensor.repr()?)
            };
            let message = format!("rank {rank} of the process group failed{at}: {what}");
            return Ok(Some((message, Some(rank), tensor.clone().unbind())));
        }
    }
    if everyone.iter().all(|(other, _)| *other == digest) {
        return Ok(None);
    }
    let message = "the ranks of the process group are not loading the same tensors of the same \
                   file: every rank must open the same file and select the same tensors (same \
                   filter_func) in the same calls";
    Ok(Some((message.to_string(), None, py.None())))
}
