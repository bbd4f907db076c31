"""The simulator's command line: `vpuc sim`, `vpuc disasm` (and `vpuc asm`).

The `vpuc` console script (compiler/cli.py, via runtime/cli.py) adds these subcommands with
the add_*_arguments functions and calls the *_command handlers; `python -m
vpuc.sim.commands sim|disasm|asm ...` runs them alone. Every user error prints one line to
stderr (`vpuc sim: PROGRAM.s:12: pc 11 'add ...': SRAM read ... out of bounds (512 KiB)`)
and returns 2; `--json` prints one JSON object and nothing else.

    vpuc sim PROGRAM.s --target T [--dram FILE.bin] [--json] [--trace OUT.json]
    vpuc disasm PROGRAM.bin
    vpuc asm PROGRAM.s -o PROGRAM.bin
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the simulator loads when a command runs: `vpuc --help` stays quick
    from rich.console import Console
    from rich.table import Table

    from vpuc.sim.simulator import SimResult
    from vpuc.sim.stats import SimStats

EXIT_USER_ERROR = 2


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", help="VPU program: assembly text (.s) or binary (.bin)")
    parser.add_argument("--target", default="vpu", help="target name or TOML path (default vpu)")
    parser.add_argument("--dram", metavar="FILE.bin", help="raw bytes loaded at DRAM address 0")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON only")
    parser.add_argument(
        "--trace", metavar="OUT.json", help="write a Chrome trace-event file (open it in ui.perfetto.dev)"
    )


def sim_command(args: argparse.Namespace) -> int:
    """Assemble (or decode) and run a program; print its statistics."""
    from rich.console import Console

    from vpuc.sim.errors import SimError, VpuError
    from vpuc.sim.simulator import Simulator
    from vpuc.sim.trace import write_chrome_trace
    from vpuc.targets import TargetError, load_target
    from vpuc.targets.isa.asm import read_program

    program = None
    try:
        target = load_target(args.target)
        program = read_program(args.program)
        image = Path(args.dram).read_bytes() if args.dram else None
        result = Simulator(target).run(program, image)
        if args.trace:
            write_chrome_trace(result, args.trace)
    except SimError as error:
        return _fail("sim", f"{program.location(error.pc)}: {error}")
    except (VpuError, TargetError, OSError) as error:
        return _fail("sim", str(error))
    if args.json:
        print(json.dumps(result.stats.to_json(), indent=2))
    else:
        print_stats(result, Console(width=None if sys.stdout.isatty() else 200))  # never cut a figure
    return 0


def add_disasm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", help="binary VPU program (.bin)")


def disasm_command(args: argparse.Namespace) -> int:
    """Print a program as assembly text that assembles back to it."""
    from vpuc.sim.errors import VpuError
    from vpuc.targets.isa.asm import disassemble, read_program

    try:
        program = read_program(args.program)
    except (VpuError, OSError) as error:
        return _fail("disasm", str(error))
    sys.stdout.write(disassemble(program))
    return 0


def add_asm_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", help="assembly text (.s)")
    parser.add_argument("-o", "--output", required=True, help="binary program to write (.bin)")


def asm_command(args: argparse.Namespace) -> int:
    """Assemble a program into the binary program format."""
    from vpuc.sim.errors import VpuError
    from vpuc.targets.isa.asm import read_program, require_end

    output = Path(args.output)
    if output.exists() and Path(args.program).exists() and output.samefile(args.program):
        return _fail("asm", f"{output}: -o names the program itself; give another file such as program.bin")
    try:
        program = read_program(args.program)
        require_end(program)
        _write_atomically(output, program.to_bytes())
    except (VpuError, OSError) as error:
        return _fail("asm", str(error))
    return 0


def _write_atomically(path: Path, data: bytes) -> None:
    """A temporary file beside `path`, renamed over it: never a half-written program."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise OSError(f"{path}: cannot write: {error.strerror}") from None


def _fail(command: str, message: str) -> int:
    print(f"vpuc {command}: {message}", file=sys.stderr)
    return EXIT_USER_ERROR


def print_stats(result: SimResult, console: Console) -> None:
    """The statistics of a run as rich tables: totals, units, layers."""
    stats = result.stats
    console.print(_summary_table(stats))
    console.print(_unit_table(stats))
    if stats.layers:
        console.print(_layer_table(stats))


def _summary_table(stats: SimStats) -> Table:
    from rich.table import Table

    from vpuc.sim.memory import format_bytes

    table = Table(title=f"VPU run on {stats.target}", show_header=False)
    rows = [
        ("total cycles", f"{stats.total_cycles:,} ({stats.time_us:,.2f} us at {stats.clock_mhz} MHz)"),
        ("instructions", f"{stats.instructions:,}"),
        ("MACs", f"{stats.macs:,} ({stats.mac_utilisation:.1%} of the array while busy)"),
        ("DRAM read / written", f"{stats.dram_read_bytes:,} / {stats.dram_written_bytes:,} bytes"),
        ("SRAM peak", f"{stats.sram_peak_bytes:,} bytes of {format_bytes(stats.sram_bytes)}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _unit_table(stats: SimStats) -> Table:
    from rich.table import Table

    table = Table(title="units")
    for column in (
        "unit",
        "busy cycles",
        "busy",
        "instructions",
        "stalled on DMA",
        "stalled on MAC",
        "stalled on VEC",
    ):
        table.add_column(column, justify="left" if column == "unit" else "right")
    for name, unit in stats.units.items():
        stalls = unit.stall_cycles
        table.add_row(
            name,
            f"{unit.busy_cycles:,}",
            f"{unit.utilisation:.1%}",
            str(unit.instructions),
            f"{stalls['wait_dma']:,}",
            f"{stalls['wait_mac']:,}",
            f"{stalls['wait_vec']:,}",
        )
    return table


def _layer_table(stats: SimStats) -> Table:
    from rich.table import Table

    table = Table(title="layers")
    for column in (
        "id",
        "layer",
        "cycles",
        "DMA busy",
        "MAC busy",
        "VEC busy",
        "MACs",
        "DRAM bytes",
        "stalls",
    ):
        table.add_column(column, justify="left" if column == "layer" else "right")
    for layer in stats.layers:
        busy = layer.busy_cycles
        table.add_row(
            str(layer.layer),
            layer.name,
            f"{layer.end_cycle - layer.start_cycle:,}",
            f"{busy['DMA']:,}",
            f"{busy['MAC']:,}",
            f"{busy['VEC']:,}",
            f"{layer.macs:,}",
            f"{layer.dram_read_bytes + layer.dram_written_bytes:,}",
            f"{layer.stall_cycles:,}",
        )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: `python -m vpuc.sim.commands sim|disasm|asm ...`."""
    parser = argparse.ArgumentParser(prog="vpuc", description="the VPU simulator")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add, handler in (
        ("sim", add_sim_arguments, sim_command),
        ("disasm", add_disasm_arguments, disasm_command),
        ("asm", add_asm_arguments, asm_command),
    ):
        add(sub.add_parser(name))
        sub.choices[name].set_defaults(handler=handler)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
