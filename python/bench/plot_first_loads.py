"""Draws BENCHMARKS.md's first-loads table as a bar chart.

    .venv-test/bin/pip install matplotlib   # once; not needed by the tests
    .venv-test/bin/python python/bench/plot_first_loads.py

Reads the table under "## First loads" in BENCHMARKS.md (the numbers of the
newest ``bench_cold.py`` run, as recorded there) and writes
``python/bench/plots/first-loads.png``: each contender's median load time,
cold and warm page cache, beside the limit measured in the same run.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "python" / "bench" / "plots" / "first-loads.png"


def table() -> list[tuple[str, float, float]]:
    text = (ROOT / "BENCHMARKS.md").read_text()
    section = text.split("## First loads", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if rows and not line.startswith("|"):
            break  # the first table only (1 GiB)
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[1].endswith(")") or "ms" not in cells[1]:
            continue
        cold, warm = (float(re.match(r"([\d.]+) ms", c).group(1)) for c in (cells[1], cells[3]))  # type: ignore[union-attr]
        rows.append((cells[0].replace("`", ""), cold, warm))
    if not rows:
        raise SystemExit("no first-loads table found in BENCHMARKS.md")
    return rows


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table()
    names = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.4), dpi=110)
    ys = range(len(rows))
    ax.barh([y - 0.2 for y in ys], [r[1] for r in rows], height=0.38, label="cold page cache", color="#3b6ea8")
    ax.barh([y + 0.2 for y in ys], [r[2] for r in rows], height=0.38, label="warm page cache", color="#e39b3b")
    limit = next((r for r in rows if r[0].startswith("limit")), None)
    if limit is not None:
        ax.axvline(limit[1], color="#3b6ea8", linestyle="--", linewidth=1)
    ax.set_yticks(list(ys), names)
    ax.invert_yaxis()
    ax.set_xlabel("first load of 1 GiB in a fresh process, median ms (lower is faster)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT)
    print(OUT.relative_to(ROOT))


if __name__ == "__main__":
    main()
