"""Regression suites: `vpuc regress DIR` compiles and runs every model of a folder for each
target and compares what it measured with the golden figures beside the model.

Sits around the whole product, not inside the pipeline: each job (one model, one target)
runs `vpuc compile --json` and `vpuc run --check --json` in a worker process of its own
(worker.py), so a job that crashes or hangs is that model's failure, and the same job runs
unchanged in a local worker or as a Ray task. docs/regress.md is the user's page.

    suite.py     the folder: models, sidecars (regress.toml), jobs
    jobs.py      one job: files into a fresh folder, the worker process, its timeout
    worker.py    the worker process: compile and run through the CLI, results to a file
    figures.py   the figures of one job and how each is compared
    golden.py    golden files: read, compare, write
    execute.py   serial, --jobs N local workers, --ray tasks; results as they finish
    report.py    the table of changes, the job summary, JUnit XML
    cli.py       the `vpuc regress` command
"""

from vpuc.compiler.regress.suite import SuiteError

__all__ = ["SuiteError"]
