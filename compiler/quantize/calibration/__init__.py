"""Calibration: the samples, the observed statistics and the range each tensor gets."""
