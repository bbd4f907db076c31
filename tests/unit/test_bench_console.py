"""No bench loses a figure to the terminal's width: printed to a pipe or a file, rich's
Console is 80 columns wide and cuts cells to fit (`bench/cpu_vs_ort.py | cat` printed
`0.0…` for its latencies). Every bench's stdout console is bench/_common.console or has a
width of its own."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from rich.table import Table

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_every_stdout_console_of_a_bench_has_a_width():
    cut = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Console":
                named = {k.arg for k in node.keywords}
                if "width" not in named and "stderr" not in named:
                    cut.append(f"{path.name}:{node.lineno}")
    assert not cut, f"a Console with rich's default width (80 columns in a pipe): {cut}"


def test_the_bench_console_keeps_a_wide_row_whole_in_a_pipe(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("_common", None)
    import _common

    table = Table()
    figures = [f"{1000 + k}.123456 ms" for k in range(12)]  # 12 cells of 13 characters: past 80
    for k in range(len(figures)):
        table.add_column(f"column {k}")
    table.add_row(*figures)
    _common.console().print(table)  # capsys: stdout is not a terminal
    out = capsys.readouterr().out
    assert "…" not in out and all(f in out for f in figures)
