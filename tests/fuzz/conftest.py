"""The fuzzer's session hooks: at the end, bisect and file every failure hypothesis
minimised (tests/fuzz_regressions/), and print and save the figures (out/fuzz_stats.json).

Examples per target: VPUC_FUZZ_EXAMPLES (default: the bounded CI number in each test)."""

from __future__ import annotations

from fuzz_check import STATS, finish_pending, write_stats


def pytest_sessionfinish(session, exitstatus):
    if not STATS:
        return
    session.config._vpuc_fuzz = write_stats(finish_pending())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    figures = getattr(config, "_vpuc_fuzz", None)
    if not figures:
        return
    terminalreporter.section("vpuc fuzz")
    for target, counts in figures["targets"].items():
        terminalreporter.write_line(f"{target}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for path in figures["saved_regressions"]:
        terminalreporter.write_line(f"new regression case: {path}")
