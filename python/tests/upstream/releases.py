"""Published releases of code we run unmodified (tensorizer's and
zipslicer's sdists, vLLM's wheel), fetched at test time with ``pip
download`` into ``target/`` once and checked against their published
SHA-256. Nothing of theirs is committed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Release:
    """One published file: the pip requirement, its file name, its SHA-256
    and how pip picks it (``--no-binary :all:`` for an sdist, else
    ``--only-binary :all:`` with an optional platform)."""

    requirement: str
    filename: str
    sha256: str
    sdist: bool = True
    platform: str | None = None

    @property
    def path(self) -> Path:
        return REPO / "target" / "releases" / self.filename


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ChecksumMismatch(Exception):
    """The cached or downloaded file is not the published one."""


def fetch(release: Release) -> tuple[Path | None, str]:
    """(the file, "") once it is here and checked, or (None, why) when pip
    cannot download it (offline). Raises ``ChecksumMismatch`` for a file
    that is not the published one."""
    path = release.path
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        pick = ["--no-binary", ":all:"] if release.sdist else ["--only-binary", ":all:"]
        if release.platform:
            pick += ["--platform", release.platform]
        cmd = [
            sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
            *pick, release.requirement, "-d", str(path.parent),
        ]  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0 or not path.is_file():
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            return None, f"could not download {release.requirement} from PyPI ({tail[0]})"
    actual = sha256_of(path)
    if actual != release.sha256:
        raise ChecksumMismatch(
            f"{path}: SHA-256 {actual} is not the published {release.sha256}; delete it to download it again"
        )
    return path, ""


def fetch_or_skip(release: Release, what: str) -> Path | None:
    """For the runner scripts: the file, or None after printing
    ``SKIPPED: ...`` (offline); exits on a checksum mismatch."""
    try:
        path, why = fetch(release)
    except ChecksumMismatch as e:
        sys.exit(str(e))
    if path is None:
        print(f"SKIPPED: {why}; {what} did not run")
    return path


def extract_package(release: Release, package: str, dest: Path) -> Path:
    """The sdist's ``package/`` folder extracted into ``dest`` (once; a
    marker file records it), for putting ``dest`` on ``sys.path``."""
    done = dest / ".extracted"
    if not done.exists():
        top = release.filename.removesuffix(".tar.gz") + "/"
        with tarfile.open(release.path) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.startswith(top + package + "/"):
                    source = tar.extractfile(m)
                    if source is None:
                        raise ValueError(f"{release.path}: {m.name} is not a regular file")
                    out = dest / m.name[len(top) :]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(source.read())
        done.write_text(release.filename + "\n")
    return dest
