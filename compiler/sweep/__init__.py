"""`vpuc sweep`: explore VPU designs through the real compiler (docs/sweep.md).

space.py (the parameters, the points, each point a Target) -> evaluate.py (the front half
once per model, the back half and the simulator per point) -> execute.py (serial, --jobs,
--ray) -> store.py (resumable), pareto.py, proxies.py (area, energy), output.py (table,
JSON, CSV, plots); cli.py is the command. Nothing below the CLI imports this package.
"""
