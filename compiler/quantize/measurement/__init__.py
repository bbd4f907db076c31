"""Measuring a quantised module: accuracy report, per-layer sensitivity, the accuracy floor."""
