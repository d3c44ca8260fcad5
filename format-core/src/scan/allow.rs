//! torch's `weights_only=True` allow-list: the globals its restricted
//! unpickler (`torch/_weights_only_unpickler.py`, `_get_allowed_globals`,
//! torch 2.15) imports. A pickle made only of these loads under
//! `torch.load(weights_only=True)`, so the scanner reports none of them
//! (`python/tests/test_scan_benign.py` checks that against torch itself).

/// `module.name` of every global torch's weights-only unpickler allows,
/// sorted (bytewise) for a binary search.
const WEIGHTS_ONLY: &[&str] = &[
    "_codecs.encode",
    "builtins.bytearray",
    "builtins.complex",
    "builtins.set",
    "collections.Counter",
    "collections.OrderedDict",
    "torch.BFloat16Storage",
    "torch.BFloat16Tensor",
    "torch.BoolStorage",
    "torch.BoolTensor",
    "torch.ByteStorage",
    "torch.ByteTensor",
    "torch.CharStorage",
    "torch.CharTensor",
    "torch.ComplexDoubleStorage",
    "torch.ComplexFloatStorage",
    "torch.DoubleStorage",
    "torch.DoubleTensor",
    "torch.FloatStorage",
    "torch.FloatTensor",
    "torch.HalfStorage",
    "torch.HalfTensor",
    "torch.IntStorage",
    "torch.IntTensor",
    "torch.LongStorage",
    "torch.LongTensor",
    "torch.QInt32Storage",
    "torch.QInt8Storage",
    "torch.QUInt2x4Storage",
    "torch.QUInt4x2Storage",
    "torch.QUInt8Storage",
    "torch.ShortStorage",
    "torch.ShortTensor",
    "torch.Size",
    "torch.Tensor",
    "torch.bcomplex32",
    "torch.bfloat16",
    "torch.bits16",
    "torch.bits1x8",
    "torch.bits2x4",
    "torch.bits4x2",
    "torch.bits8",
    "torch.bool",
    "torch.complex128",
    "torch.complex32",
    "torch.complex64",
    "torch.device",
    "torch.float16",
    "torch.float32",
    "torch.float4_e2m1fn_x2",
    "torch.float64",
    "torch.float8_e4m3fn",
    "torch.float8_e4m3fnuz",
    "torch.float8_e5m2",
    "torch.float8_e5m2fnuz",
    "torch.float8_e8m0fnu",
    "torch.int1",
    "torch.int16",
    "torch.int2",
    "torch.int3",
    "torch.int32",
    "torch.int4",
    "torch.int5",
    "torch.int6",
    "torch.int64",
    "torch.int7",
    "torch.int8",
    "torch.per_channel_affine",
    "torch.per_channel_affine_float_qparams",
    "torch.per_channel_symmetric",
    "torch.per_tensor_affine",
    "torch.per_tensor_symmetric",
    "torch.qint32",
    "torch.qint8",
    "torch.quint2x4",
    "torch.quint4x2",
    "torch.quint8",
    "torch.uint1",
    "torch.uint16",
    "torch.uint2",
    "torch.uint3",
    "torch.uint32",
    "torch.uint4",
    "torch.uint5",
    "torch.uint6",
    "torch.uint64",
    "torch.uint7",
    "torch.uint8",
    "torch._tensor._rebuild_from_type_v2",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor",
    "torch._utils._rebuild_device_tensor_from_numpy",
    "torch._utils._rebuild_meta_tensor_no_storage",
    "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state",
    "torch._utils._rebuild_qtensor",
    "torch._utils._rebuild_sparse_tensor",
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_wrapper_subclass",
    "torch.cuda.BFloat16Storage",
    "torch.cuda.BFloat16Tensor",
    "torch.cuda.BoolStorage",
    "torch.cuda.BoolTensor",
    "torch.cuda.ByteStorage",
    "torch.cuda.ByteTensor",
    "torch.cuda.CharStorage",
    "torch.cuda.CharTensor",
    "torch.cuda.ComplexDoubleStorage",
    "torch.cuda.ComplexFloatStorage",
    "torch.cuda.DoubleStorage",
    "torch.cuda.DoubleTensor",
    "torch.cuda.FloatStorage",
    "torch.cuda.FloatTensor",
    "torch.cuda.HalfStorage",
    "torch.cuda.HalfTensor",
    "torch.cuda.IntStorage",
    "torch.cuda.IntTensor",
    "torch.cuda.LongStorage",
    "torch.cuda.LongTensor",
    "torch.cuda.ShortStorage",
    "torch.cuda.ShortTensor",
    "torch.cuda.sparse.BFloat16Tensor",
    "torch.cuda.sparse.ByteTensor",
    "torch.cuda.sparse.CharTensor",
    "torch.cuda.sparse.DoubleTensor",
    "torch.cuda.sparse.FloatTensor",
    "torch.cuda.sparse.HalfTensor",
    "torch.cuda.sparse.IntTensor",
    "torch.cuda.sparse.LongTensor",
    "torch.cuda.sparse.ShortTensor",
    "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout",
    "torch.sparse.BFloat16Tensor",
    "torch.sparse.ByteTensor",
    "torch.sparse.CharTensor",
    "torch.sparse.DoubleTensor",
    "torch.sparse.FloatTensor",
    "torch.sparse.HalfTensor",
    "torch.sparse.IntTensor",
    "torch.sparse.LongTensor",
    "torch.sparse.ShortTensor",
    "torch.storage.TypedStorage",
    "torch.storage.UntypedStorage",
];

/// Whether `torch.load(weights_only=True)` imports `module.name`. Protocol
/// 2 writes builtins under their Python 2 module, `__builtin__`, which
/// unpicklers map back (`_compat_pickle.IMPORT_MAPPING`).
pub(super) fn weights_only(module: &[u8], name: &[u8]) -> bool {
    let module = if module == b"__builtin__" { b"builtins" } else { module };
    let (Ok(m), Ok(n)) = (core::str::from_utf8(module), core::str::from_utf8(name)) else {
        return false;
    };
    WEIGHTS_ONLY
        .binary_search_by(|e| {
            let (em, en) = e.rsplit_once('.').unwrap_or((e, ""));
            (em, en).cmp(&(m, n))
        })
        .is_ok()
}

/// How a global that `weights_only=True` refuses may still be used without
/// running code outside its own, installed library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inert {
    /// Not inert: importing or calling it is an error.
    No,
    /// A class that `NEWOBJ` makes with `cls.__new__` and `BUILD` fills
    /// (its own `__setstate__`, or the instance `__dict__`): a whole
    /// `torch.nn` module, `argparse.Namespace`. Calling it otherwise is an
    /// error.
    Instantiate,
    /// A function or class any call of which only rebuilds a value: numpy's
    /// array and scalar reconstructors, `numpy.dtype`.
    Call,
}

/// Whether `module.name` is inert (see [`Inert`]). `torch.nn.modules`
/// names only its classes (capitalised); its functions are not inert.
pub(super) fn inert(module: &[u8], name: &[u8]) -> Inert {
    match (module, name) {
        (b"argparse", b"Namespace") => Inert::Instantiate,
        (b"numpy", b"ndarray") => Inert::Instantiate,
        (b"numpy", b"dtype") => Inert::Call,
        (b"numpy.core.multiarray" | b"numpy._core.multiarray", b"_reconstruct" | b"scalar") => {
            Inert::Call
        }
        (m, [b'A'..=b'Z', ..]) if m.starts_with(b"torch.nn.modules.") => Inert::Instantiate,
        _ => Inert::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_sorted_by_module_then_name_and_found() {
        let key = |e: &'static str| e.rsplit_once('.').unwrap();
        assert!(WEIGHTS_ONLY.windows(2).all(|w| key(w[0]) < key(w[1])));
        for e in WEIGHTS_ONLY {
            let (m, n) = key(e);
            assert!(weights_only(m.as_bytes(), n.as_bytes()), "{e}");
        }
        assert!(!weights_only(b"posix", b"system"));
        assert!(!weights_only(b"torch", b"load"));
        assert!(weights_only(b"__builtin__", b"set") && !weights_only(b"__builtin__", b"eval"));
    }
}
