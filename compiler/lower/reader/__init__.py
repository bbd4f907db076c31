"""The Relax reader: partitioned Relax VPU functions -> the VPU op list (compiler/lower/ops.py)."""
