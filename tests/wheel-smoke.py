"""The wheel as a newcomer gets it: installed with pip into a fresh virtual
environment whose PATH has no Rust toolchain, then used from there.

    python tests/wheel-smoke.py WHEEL

Run with the test environment's interpreter (it has torch and the real
tensorizer, which the fresh environment borrows through a path entry: the
smoke tests need them, and installing torch again would cost minutes; the
wheel itself and its declared dependencies are installed by pip). Checks:
the wheel's size and contents, README's quick start verbatim, `tzr` and
`python -m tensorizer_rs` on PATH, a round trip read by the real
tensorizer in both directions, and that building from source without a
toolchain stops at once with one line.
"""

import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_WHEEL_BYTES = 25 * 1000 * 1000
QUICK_START_MARK = "<!-- quick start:"


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"wheel-smoke: FAILED: {what}")
    print(f"ok: {what}")


def run(args: list[str], env: dict[str, str], cwd: Path, expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    if done.returncode != expect:
        raise SystemExit(
            f"wheel-smoke: {args} exited {done.returncode}, not {expect}\n{done.stdout}\n{done.stderr}"
        )
    return done


def quick_start() -> str:
    """README's quick start, the first python block after its mark."""
    text = (ROOT / "README.md").read_text()
    after = text[text.index(QUICK_START_MARK) :]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match, "README has no python block after the quick start mark"
    return match.group(1)


def check_wheel(wheel: Path) -> None:
    size = wheel.stat().st_size
    check(size <= MAX_WHEEL_BYTES, f"wheel is {size / 1e6:.1f} MB (at most {MAX_WHEEL_BYTES / 1e6:.0f} MB)")
    check("-abi3-manylinux_" in wheel.name, f"{wheel.name} is abi3 and manylinux")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    check(any(n.endswith("licenses/LICENSE-MIT") for n in names), "the MIT licence is in the wheel")
    check(any(n.endswith("licenses/LICENSE-APACHE") for n in names), "the Apache licence is in the wheel")
    check("example.invalid" not in metadata, "no placeholder URL in the metadata")


def fresh_env(tmp: Path, wheel: Path) -> tuple[Path, dict[str, str]]:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp), "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1"}
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)]
    subprocess.run(pip, env={**env, "PATH": f"{venv / 'bin'}:/usr/bin:/bin"}, check=True, timeout=600)
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env, tmp)
    # torch and the real tensorizer, borrowed: after the venv's own packages.
    borrowed = sysconfig.get_paths()["purelib"]
    (Path(site.stdout.strip()) / "borrowed-test-env.pth").write_text(borrowed + "\n")
    return python, env


def check_commands(python: Path, env: dict[str, str], tmp: Path) -> None:
    for tool in ("cargo", "rustc", "rustup"):
        found = subprocess.run(["/bin/sh", "-c", f"command -v {tool}"], env=env, capture_output=True)
        check(found.returncode != 0, f"{tool} is not on the fresh environment's PATH")
    where = run([str(python), "-c", "import tensorizer_rs; print(tensorizer_rs.__file__)"], env, tmp).stdout
    check(where.startswith(str(tmp / "venv")), f"tensorizer_rs comes from the wheel ({where.strip()})")
    version = run(["tzr", "--version"], env, tmp).stdout
    check(version.startswith("tzr "), f"`tzr --version` on PATH: {version.strip()}")
    same = run([str(python), "-m", "tensorizer_rs", "--version"], env, tmp).stdout
    check(same == version, "`python -m tensorizer_rs --version` is the same command")
    plugin = (
        "from importlib.metadata import entry_points as e; "
        "[p] = [p for p in e(group='vllm.general_plugins') if p.name == 'tensorizer_rs']; p.load()()"
    )
    run([str(python), "-c", plugin], env, tmp)
    check(True, "the vllm.general_plugins entry point is installed and loads")
    usage = run([str(python), "-m", "tensorizer_rs.vllm", "--help"], env, tmp).stdout
    check("--tp-size" in usage, "`python -m tensorizer_rs.vllm` (writing for vLLM) runs without vLLM")
    subcommands = run(["tzr", "--help"], env, tmp).stdout
    for name in ("inspect", "verify", "convert", "encrypt", "fingerprint", "diff", "scan", "view", "copy"):
        check(f"  {name}" in subcommands, f"the wheel's tzr has `{name}`")


def check_quick_start(python: Path, env: dict[str, str], tmp: Path) -> None:
    work = tmp / "quick-start"
    work.mkdir()
    (work / "quick_start.py").write_text(quick_start())
    run([str(python), "quick_start.py"], env, work)
    check((work / "model.tensors").is_file(), "README's quick start runs as pasted")
    out = run(["tzr", "verify", "model.tensors"], env, work).stdout
    check("verified" in out, f"tzr verifies its file: {out.strip()}")
    refused = run(["tzr", "convert", "model.tensors", "model.pt"], env, work, expect=2).stderr
    check("cannot write torch.save" in refused, "tzr refuses to write tensorizer bytes into a .pt name")


ROUND_TRIP = """
import torch, tensorizer, tensorizer_rs
sd = {"w": torch.randn(7, 5), "b": torch.arange(11, dtype=torch.int64), "h": torch.randn(3).half()}
with tensorizer_rs.TensorSerializer("ours.tensors") as s:
    s.write_state_dict(sd)
with tensorizer.TensorDeserializer("ours.tensors", device="cpu", verify_hash=True) as d:
    assert all(torch.equal(d[k], v) for k, v in sd.items())
s = tensorizer.TensorSerializer("theirs.tensors"); s.write_state_dict(sd); s.close()
with tensorizer_rs.TensorDeserializer("theirs.tensors", device="cpu", verify_hash=True) as d:
    assert all(torch.equal(d[k], v) for k, v in sd.items())
assert tensorizer.__file__ != tensorizer_rs.__file__
from tensorizer_rs.safetensors.torch import load_file, save_file
save_file(sd, "ours.safetensors")
assert all(torch.equal(load_file("ours.safetensors")[k], v) for k, v in sd.items())
"""


def check_round_trip(python: Path, env: dict[str, str], tmp: Path) -> None:
    work = tmp / "round-trip"
    work.mkdir()
    run([str(python), "-c", ROUND_TRIP], env, work)
    check(True, "the real tensorizer reads our file, and we read its file; safetensors' API round-trips")


def check_no_toolchain_build(tmp: Path) -> None:
    """`pip install ./python` without cargo: one line, at once."""
    bindir = Path(sys.executable).parent
    env = {"PATH": str(bindir), "HOME": str(tmp), "LANG": "C.UTF-8", "PIP_NO_INPUT": "1"}
    args = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp / "w")]
    started = time.monotonic()
    done = subprocess.run([*args, str(ROOT / "python")], env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    said = done.stdout + done.stderr
    ours = [line.strip() for line in said.splitlines() if line.strip().startswith("tensorizer-rs: ")]
    check(done.returncode != 0 and len(ours) == 1, f"a build without Rust stops: {ours}")
    check("rustup" in ours[0] and "Traceback" not in said, "its one line names what to install")
    check(took < 60, f"at once ({took:.1f} s)")


def main() -> None:
    wheel = Path(sys.argv[1]).resolve()
    check_wheel(wheel)
    with tempfile.TemporaryDirectory(prefix="wheel-smoke-") as t:
        tmp = Path(t)
        python, env = fresh_env(tmp, wheel)
        check_commands(python, env, tmp)
        check_quick_start(python, env, tmp)
        check_round_trip(python, env, tmp)
        check_no_toolchain_build(tmp)
    print("wheel-smoke: every check passed")


if __name__ == "__main__":
    main()
