"""The lowering memo (compiler/lower/memo.py): a subgraph is lowered once per content,
target and switches within a process. A hit must be the program a fresh lowering makes; a
change to anything lowering reads (a weight, the target, a module switch) must lower again."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from vpuc.compiler.lower import memo
from vpuc.compiler.lower.codegen import emit, prefetch, tile_im2col
from vpuc.compiler.lower.errors import LowerError

from .conftest import Builder, with_sram

CODEGEN = Path(memo.__file__).parent / "codegen"


def _subgraph(seed: int = 3):
    b = Builder(seed)
    x = b.input("x", (1, 15, 13, 24))
    y = b.conv(x, "c1", 40, stride=(2, 2), relu=True)
    y = b.conv(y, "dw", 40, groups=40, relu=True)
    return b.subgraph([b.dense(y, "fc", 10)])


@pytest.fixture
def lowerings(monkeypatch) -> list:
    """The subgraphs emit.lower_subgraph is asked to lower from now on (the memo empty)."""
    calls = []
    real = emit.lower_subgraph

    def counting(subgraph, target):
        calls.append(subgraph.symbol)
        return real(subgraph, target)

    monkeypatch.setattr(memo, "_LOWERED", {})
    monkeypatch.setattr(emit, "lower_subgraph", counting)
    return calls


def _bytes(program) -> tuple[bytes, bytes]:
    return program.program.to_bytes(), program.blob


def test_a_repeated_lowering_is_a_copy_of_the_first(vpu, lowerings):
    first = memo.lower(_subgraph(), vpu)
    first.estimate["cycles"] = -1  # a caller writes into its copy (mark_edge does)
    first.symbol = "changed"
    again = memo.lower(_subgraph(), vpu)  # the same content, built anew
    assert len(lowerings) == 1
    cold = emit.lower_subgraph(_subgraph(), vpu)  # a lowering without the memo
    assert _bytes(again) == _bytes(cold)
    assert again.estimate == cold.estimate and again.layers == cold.layers and again.symbol == cold.symbol


def test_what_lowering_reads_is_in_the_key(vpu, lowerings):
    memo.lower(_subgraph(), vpu)
    other_weights = _subgraph()
    conv = other_weights.ops[0]
    weights = conv.weights.copy()
    weights.flat[0] = np.int8(weights.flat[0] ^ 1)
    other_weights.ops[0] = dataclasses.replace(conv, weights=weights)
    memo.lower(other_weights, vpu)
    memo.lower(_subgraph(), with_sram(vpu, 16 * 1024))
    assert len(lowerings) == 3
    memo.lower(_subgraph(), vpu)
    assert len(lowerings) == 3


def _labelled(symbol: str, index: int):
    subgraph = _subgraph()
    subgraph.symbol, subgraph.index = symbol, index
    return subgraph


def test_another_label_takes_the_program_under_its_own(vpu, lowerings):
    """A subgraph differing only by its symbol and index (the final cut numbering it otherwise
    than the raw cut) is not lowered again: it gets what a fresh lowering of it gives, its
    labels included (memo.UNLABELLED_KEY)."""
    memo.lower(_labelled("vpu_sg0", 0), vpu)
    again = memo.lower(_labelled("vpu_sg3", 3), vpu)
    assert len(lowerings) == 1
    cold = emit.lower_subgraph(_labelled("vpu_sg3", 3), vpu)  # a lowering without the memo
    assert _bytes(again) == _bytes(cold)
    assert (again.symbol, again.index, again.program.source) == (cold.symbol, cold.index, cold.program.source)
    assert again.estimate == cold.estimate and again.layers == cold.layers
    assert again.inputs == cold.inputs and again.outputs == cold.outputs and again.dram_map == cold.dram_map
    assert again.checkpoints == cold.checkpoints
    first = memo.lower(_labelled("vpu_sg0", 0), vpu)  # the first labels kept for their own
    assert (first.symbol, first.index, first.program.source) == ("vpu_sg0", 0, "vpu_sg0")


def test_with_the_labels_in_the_key_another_label_lowers_again(vpu, lowerings, monkeypatch):
    monkeypatch.setattr(memo, "UNLABELLED_KEY", False)
    memo.lower(_labelled("vpu_sg0", 0), vpu)
    memo.lower(_labelled("vpu_sg3", 3), vpu)
    assert len(lowerings) == 2


def test_a_failure_under_another_label_names_its_own(vpu, monkeypatch):
    """A failure's message may name the subgraph (emit: "vpu_sg2: its layers do not fit SRAM
    together"): under another label it is lowered again, so the message names that one."""
    calls = []

    def failing(subgraph, target):
        calls.append(subgraph.symbol)
        raise LowerError(f"{subgraph.symbol}: its layers do not fit SRAM together")

    monkeypatch.setattr(memo, "_LOWERED", {})
    monkeypatch.setattr(emit, "lower_subgraph", failing)
    messages = []
    for symbol, index in (("vpu_sg0", 0), ("vpu_sg5", 5), ("vpu_sg0", 0)):
        with pytest.raises(LowerError) as caught:
            memo.lower(_labelled(symbol, index), vpu)
        messages.append(str(caught.value).split(":")[0])
    assert messages == ["vpu_sg0", "vpu_sg5", "vpu_sg0"]
    assert calls == ["vpu_sg0", "vpu_sg5", "vpu_sg0"]  # the last: vpu_sg5's replaced it


@pytest.mark.parametrize(
    ("module", "name", "value"),
    [(tile_im2col, "CHOOSE", "conv"), (prefetch, "PREFETCH_ROLES", frozenset())],
)
def test_a_patched_switch_lowers_again(vpu, lowerings, monkeypatch, module, name, value):
    memo.lower(_subgraph(), vpu)
    monkeypatch.setattr(module, name, value)
    memo.lower(_subgraph(), vpu)
    assert len(lowerings) == 2


def test_a_failure_is_remembered(vpu, lowerings):
    tiny = with_sram(vpu, 256)
    for _ in range(2):
        with pytest.raises(LowerError):
            memo.lower(_subgraph(), tiny)
    assert len(lowerings) == 1


def _module_constants(path: Path) -> list[str]:
    found = []
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if isinstance(target, ast.Name) and target.id.lstrip("_").isupper():
                found.append(target.id)
    return found


def test_every_codegen_constant_is_a_switch_or_a_fact():
    """A new module constant of the code generator must join memo.SWITCHES (it changes what
    is emitted, so the key) or memo.FIXED (it does not)."""
    switches = {(m.__name__.rsplit(".", 1)[-1], name) for m, name in memo.SWITCHES}
    for path in sorted(CODEGEN.glob("*.py")):
        for name in _module_constants(path):
            listed = (path.stem, name) in switches or name in memo.FIXED.get(path.stem, ())
            assert listed, f"{path.name}: {name} is neither in memo.SWITCHES nor in memo.FIXED"
