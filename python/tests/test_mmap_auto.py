"""``mmap="auto"`` maps only files that provably cannot change while
mapped (spec §23.6): immutable files and files on a read-only local file
system; an ordinary file, or one behind a read-only bind mount of a
writable file system, is copied."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import tensorizer_rs
from tensorizer_rs import _native

ROOT = os.geteuid() == 0


def _write(path: Path) -> dict[str, torch.Tensor]:
    sd = {"a": torch.arange(4096, dtype=torch.float32), "b": torch.ones(3, 5, dtype=torch.bfloat16)}
    with tensorizer_rs.TensorSerializer(str(path)) as s:
        s.write_state_dict(sd)
    return sd


def _mapped(path: Path) -> bool:
    with tensorizer_rs.TensorDeserializer(str(path), mmap="auto") as d:
        return d._map is not None


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def test_an_ordinary_file_is_copied(tmp_path: Path) -> None:
    path = tmp_path / "m.tensors"
    sd = _write(path)
    assert _native.file_frozen(path) is None
    assert not _mapped(path)
    with tensorizer_rs.TensorDeserializer(str(path), mmap="auto") as d:
        assert all(torch.equal(d[k], sd[k]) for k in sd)
    with pytest.raises(ValueError, match="auto"):
        tensorizer_rs.TensorDeserializer(str(path), mmap="always")  # type: ignore[arg-type]


@pytest.mark.skipif(not ROOT or shutil.which("chattr") is None, reason="chattr +i needs root")
def test_an_immutable_file_is_mapped(tmp_path: Path) -> None:
    path = tmp_path / "m.tensors"
    sd = _write(path)
    try:
        _run("chattr", "+i", str(path))
    except subprocess.CalledProcessError:
        pytest.skip("this file system has no immutable attribute")
    try:
        assert _native.file_frozen(path) == "immutable"
        with tensorizer_rs.TensorDeserializer(str(path), mmap="auto") as d:
            assert d._map is not None
            assert all(torch.equal(d[k], sd[k]) for k in sd)
    finally:
        _run("chattr", "-i", str(path))


@contextlib.contextmanager
def _mounted_image(tmp_path: Path, read_only: bool) -> Iterator[Path]:
    image, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    with image.open("wb") as f:
        f.truncate(16 << 20)
    _run("mkfs.ext4", "-q", "-F", str(image))
    try:
        _run("mount", "-o", "loop", str(image), str(mnt))
    except subprocess.CalledProcessError:
        pytest.skip("loop mounts are not available here")
    try:
        _write(mnt / "m.tensors")
        if read_only:
            _run("mount", "-o", "remount,ro", str(mnt))
        yield mnt
    finally:
        _run("umount", str(mnt))


@pytest.mark.skipif(not ROOT or shutil.which("mkfs.ext4") is None, reason="loop mounts need root and mkfs.ext4")
def test_a_read_only_file_system_is_mapped_and_a_read_only_bind_mount_is_not(tmp_path: Path) -> None:
    with _mounted_image(tmp_path, read_only=True) as mnt:
        assert _native.file_frozen(mnt / "m.tensors") == "read-only file system"
        assert _mapped(mnt / "m.tensors")
    bind = tmp_path / "bind"
    bind.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    _write(src / "m.tensors")
    try:
        _run("mount", "--bind", "-o", "ro", str(src), str(bind))
    except subprocess.CalledProcessError:
        pytest.skip("bind mounts are not available here")
    try:
        # The mount is read-only; the file system under it is not.
        with pytest.raises(OSError):
            (bind / "x").write_bytes(b"x")
        assert _native.file_frozen(bind / "m.tensors") is None
        assert not _mapped(bind / "m.tensors")
    finally:
        _run("umount", str(bind))
