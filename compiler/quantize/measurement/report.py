"""The accuracy section of the printed compile report (JSON output bypasses this).

accuracy dict (accuracy.py)  ->  rich Tables: one row per model output, then per layer,
                                then the per-layer sensitivity with the accuracy floor
"""

from __future__ import annotations

from rich.table import Table

SENSITIVITY_ROWS = 12


def accuracy_tables(accuracy: dict) -> list[Table]:
    """[outputs table, layers table] for `vpuc compile`'s printed report."""
    synthetic = str(accuracy.get("held_out", "")).startswith("synthetic")
    kind = "synthetic (random, not your data) " if synthetic else ""
    title = f"Quantised vs float on {accuracy['samples']} held-out {kind}sample(s)"
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
    tables = [outputs, layers]
    if accuracy.get("sensitivity_skipped"):
        layers.caption = f"per-layer sensitivity {accuracy['sensitivity_skipped']}"
    if accuracy.get("sensitivity"):
        tables.append(sensitivity_table(accuracy))
    return tables


def sensitivity_table(accuracy: dict, rows: int = SENSITIVITY_ROWS) -> Table:
    """The most sensitive layers first: output SQNR with only that layer in int8."""
    ranked = sorted(accuracy["sensitivity"], key=lambda r: (r["sqnr_alone_db"], r["layer"]))
    hidden = len(ranked) - rows
    table = Table(
        title="Per-layer sensitivity: output SQNR with only this layer in int8 (most sensitive first)",
        caption=_floor_caption(accuracy.get("floor"))
        + (f"; {hidden} less sensitive layer(s) in --json" if hidden > 0 else ""),
    )
    table.add_column("layer (ONNX node)")
    table.add_column("kind")
    table.add_column("SQNR alone (dB)", justify="right")
    table.add_column("in float", justify="center")
    for row in ranked[:rows]:
        kept = "yes" if row["kept_float"] else ""
        table.add_row(row["layer"], row["kind"], f"{row['sqnr_alone_db']:.1f}", kept)
    return table


def _floor_caption(floor: dict | None) -> str:
    if floor is None:
        return "no accuracy floor (--min-sqnr off)"
    kept = floor["kept_float"]
    if not kept:
        figure = floor["sqnr_db"]
        return f"--min-sqnr {floor['min_sqnr_db']:g}: met with every layer in int8 ({figure:.1f} dB)"
    verdict = "met" if floor["sqnr_db"] >= floor["min_sqnr_db"] else "NOT met"
    return (
        f"--min-sqnr {floor['min_sqnr_db']:g}: {verdict}; {floor['sqnr_db_all_int8']:.1f} dB all int8, "
        f"{floor['sqnr_db']:.1f} dB with {len(kept)} layer(s) in float"
    )
