"""The accuracy section of the printed compile report (JSON output bypasses this).

accuracy dict (accuracy.py)  ->  rich Tables: one row per model output, then per layer
"""

from __future__ import annotations

from rich.table import Table


def accuracy_tables(accuracy: dict) -> list[Table]:
    """[outputs table, layers table] for `vpuc compile`'s printed report."""
    title = f"Quantised vs float on {accuracy['samples']} held-out sample(s)"
    outputs = Table(title=title)
    for column in ("output", "SQNR (dB)", "cosine", "max abs err", "top-1 agreement"):
        outputs.add_column(column, justify="left" if column == "output" else "right")
    for row in accuracy["outputs"]:
        agreement = "-" if row["top1_agreement"] is None else f"{row['top1_agreement']:.1%}"
        outputs.add_row(
            row["name"],
            f"{row['sqnr_db']:.1f}",
            f"{row['cosine']:.5f}",
            f"{row['max_abs_err']:.4g}",
            agreement,
        )
    layers = Table(title="Per-layer SQNR of the quantised tensors (graph order)")
    layers.add_column("layer (ONNX node)")
    layers.add_column("SQNR (dB)", justify="right")
    for row in accuracy["layers"]:
        layers.add_row(row["name"], f"{row['sqnr_db']:.1f}")
    return [outputs, layers]
