"""Draws BENCHMARKS.md's plots: the 1 GiB first loads and the scaling rows.

    python3 -m venv .venv-plot && .venv-plot/bin/pip install -q matplotlib   # once
    .venv-plot/bin/python python/bench/plot_benchmarks.py

Writes two PNGs to ``python/bench/plots/``:

- ``first-loads.png``: the first table under "## First loads" in BENCHMARKS.md,
  read out of that file, so the plot follows the table: each contender's median
  load time, cold and warm page cache, beside the limit measured in the same run.
- ``scaling.png``: how throughput follows file size, readers and ranks, from the
  numbers BENCHMARKS.md records in its sections (first loads at 1 and 8 GiB, GPU
  readers, encrypted and verified loads, cooperative loads). Those sit in
  ``SCALING`` below; update them with the sections they come from.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLOTS = ROOT / "python" / "bench" / "plots"

#: BENCHMARKS.md's scaling numbers, section by section.
SCALING = {
    # "First loads": median ms of a fresh-process load, 1 and 8 GiB (VM, commit f21742c).
    "first_loads_ms": {
        "tensorizer_rs": {"cold": (588, 5863), "warm": (345, 5084)},
        "tensorizer 2.12.1": {"cold": (1131, 15792), "warm": (620, 7127)},
        "safetensors load_file (a map, warm)": {"cold": (814, 9223), "warm": (72, 428)},
        "limit: sequential reads": {"cold": (717, 9137), "warm": (171, 1355)},
        "copy-4k: private copy, 4 KiB pages": {"cold": (637, 5415), "warm": (309, 2536)},
    },
    # "GPU": 8 GiB to cuda, carved, GB/s by reader count (H200, commit 05d01e0's ring),
    # beside the pinned copy_ limit of the current run.
    "gpu_readers_gbps": {"readers": (4, 8, 12, 16), "ours": (26.1, 39.2, 41.3, 40.8)},
    "gpu_limit_gbps": 55.2,
    # "Encryption and verification": Python loads of 0.5 GiB, GB/s by reader count (VM).
    "crypto_gbps": {
        "readers": (1, 2),
        "tensorizer_rs encrypted": (2.22, 4.12),
        "tensorizer encrypted": (1.05, 2.00),
        "tensorizer_rs verified": (1.84, 3.49),
        "tensorizer verified": (1.00, 1.90),
    },
    # "Cooperative loading": HTTP store bytes per load (× the file) by gloo ranks (VM).
    "cooperative_store_bytes": {
        "ranks": (1, 2, 4),
        "independent": (1.00, 2.00, 4.00),
        "cooperative": (1.00, 1.00, 1.01),
    },
}


def first_loads_table() -> list[tuple[str, float, float]]:
    text = (ROOT / "BENCHMARKS.md").read_text()
    section = text.split("## First loads", 1)[1].split("\n## ", 1)[0]
    rows = []
    cold_at = warm_at = -1
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break  # the first table only (1 GiB)
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if cells[0] == "contender":  # the header names the columns
            cold_at = next(i for i, c in enumerate(cells) if c.startswith("cold"))
            warm_at = next(i for i, c in enumerate(cells) if c.startswith("warm"))
            continue
        if cold_at < 0 or len(cells) <= warm_at or not cells[cold_at].endswith(")"):
            continue
        if "S3" in cells[0]:
            continue  # moto's rows would set the scale; they are in the table
        rows.append((cells[0].replace("`", "").replace("**", ""), _ms(cells[cold_at]), _ms(cells[warm_at])))
    if not rows:
        raise SystemExit("no first-loads table found in BENCHMARKS.md")
    return rows


def _ms(cell: str) -> float:
    found = re.match(r"\**([\d.]+) ms", cell)
    if found is None:
        raise SystemExit(f"not a time in ms: {cell!r}")
    return float(found.group(1))


def draw_first_loads(plt) -> Path:  # type: ignore[no-untyped-def]
    rows = first_loads_table()
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(rows) + 1.6), dpi=110)
    ys = range(len(rows))
    ax.barh([y - 0.2 for y in ys], [r[1] for r in rows], height=0.38, label="cold page cache", color="#3b6ea8")
    ax.barh([y + 0.2 for y in ys], [r[2] for r in rows], height=0.38, label="warm page cache", color="#e39b3b")
    limit = next((r for r in rows if r[0].startswith("limit")), None)
    if limit is not None:
        ax.axvline(limit[1], color="#3b6ea8", linestyle="--", linewidth=1)
        ax.axvline(limit[2], color="#e39b3b", linestyle="--", linewidth=1)
    ax.set_yticks(list(ys), [r[0] for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("first load of 1 GiB in a fresh process, median ms (lower is faster; dashed: the limit)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _save(fig, "first-loads.png")


def draw_scaling(plt) -> Path:  # type: ignore[no-untyped-def]
    fig, axes = plt.subplots(2, 3, figsize=(15, 9), dpi=100)
    _size_panel(axes[0][0], "cold")
    _size_panel(axes[0][1], "warm")
    axes[0][2].axis("off")
    axes[0][2].legend(*axes[0][0].get_legend_handles_labels(), loc="center", frameon=False, title="first loads (VM)")
    _gpu_panel(axes[1][0])
    _crypto_panel(axes[1][1])
    _ranks_panel(axes[1][2])
    fig.tight_layout()
    return _save(fig, "scaling.png")


def _size_panel(ax, cache: str) -> None:  # type: ignore[no-untyped-def]
    from matplotlib.ticker import ScalarFormatter

    sizes = (1, 8)
    for name, times in SCALING["first_loads_ms"].items():
        gbps = [gib * 1.073741824 / (ms / 1000) for gib, ms in zip(sizes, times[cache])]
        style = "--" if name.startswith(("limit", "device")) else "-"
        ax.plot(sizes, gbps, style, marker="o", label=name, linewidth=2.5 if name == "tensorizer_rs" else 1.5)
    if cache == "warm":  # safetensors' map copies nothing: tens of GB/s beside the copies' 1-3
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.set_ylabel("GB/s (higher is faster; log scale)")
    else:
        ax.set_ylim(0, 2.2)
        ax.set_ylabel("GB/s (higher is faster)")
    ax.set_xticks(sizes, ["1 GiB", "8 GiB"])
    ax.set_title(f"first load, fresh process, {cache} page cache (VM)")
    ax.grid(alpha=0.3, which="both")


def _gpu_panel(ax) -> None:  # type: ignore[no-untyped-def]
    data = SCALING["gpu_readers_gbps"]
    ax.plot(data["readers"], data["ours"], marker="o", linewidth=2.5, label="tensorizer_rs, carved")
    ax.axhline(SCALING["gpu_limit_gbps"], color="grey", linestyle="--", label="pinned copy_ limit")
    ax.set_ylim(0, 60)
    ax.set_xticks(data["readers"])
    ax.set_xlabel("readers")
    ax.set_ylabel("GB/s")
    ax.set_title("8 GiB to cuda, warm (H200, 16 MiB ring)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)


def _crypto_panel(ax) -> None:  # type: ignore[no-untyped-def]
    data = SCALING["crypto_gbps"]
    for name, gbps in data.items():
        if name != "readers":
            ours = name.startswith("tensorizer_rs")
            ax.plot(data["readers"], gbps, "-" if ours else "--", marker="o", label=name, linewidth=2.5 if ours else 1.5)
    ax.set_ylim(0, 5)
    ax.set_xticks(data["readers"])
    ax.set_xlabel("readers (the VM has 2 cores)")
    ax.set_ylabel("GB/s")
    ax.set_title("encrypted and verified loads, 0.5 GiB (VM)")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)


def _ranks_panel(ax) -> None:  # type: ignore[no-untyped-def]
    data = SCALING["cooperative_store_bytes"]
    ax.plot(data["ranks"], data["independent"], "--", marker="o", label="independent loads")
    ax.plot(data["ranks"], data["cooperative"], marker="o", linewidth=2.5, label="cooperative (process_group)")
    ax.set_ylim(0, 4.5)
    ax.set_xticks(data["ranks"])
    ax.set_xlabel("gloo ranks")
    ax.set_ylabel("bytes the store serves, × the file")
    ax.set_title("cooperative loading over HTTP, 64.8 MiB (VM)")
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)


def _save(fig, name: str) -> Path:  # type: ignore[no-untyped-def]
    PLOTS.mkdir(parents=True, exist_ok=True)
    path = PLOTS / name
    fig.savefig(path)
    return path


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for path in (draw_first_loads(plt), draw_scaling(plt)):
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
