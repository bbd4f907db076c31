"""The example model zoo: small ONNX models built with onnx.helper from seeded weights.

Used by `vpuc zoo OUTDIR`, the README demo, the tests and the benchmarks. No downloads.
"""
