"""The VPU simulator: ISA, functional int8 semantics, timing model, statistics and traces.

Imports only `vpuc.targets`. The compiler never imports this package (it has its own cost
model); the runtime runs every VPU call here.
"""
