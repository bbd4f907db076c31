"""Helpers for the pass tests: run one pass on a TVMScript module, bind weights as
constants, compare with the Expected module. (A module of its own: test files import it by
name, and a bare `conftest` would clash with other test folders' conftest modules.)"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler.passes import Audit, PassOptions, strip_audit


def bind(mod: tvm.IRModule, **params: np.ndarray) -> tvm.IRModule:
    """main's parameters named in `params` become constants (how weights reach a pass)."""
    return relax.transform.BindParams("main", {k: np.asarray(v) for k, v in params.items()})(mod)


def named(mod: tvm.IRModule) -> tvm.IRModule:
    """Attach a provenance naming each binding after its var, so the audit reads var names."""
    names = [b.var.name for block in mod["main"].body.blocks for b in block.bindings]
    return Audit(provenance={name: [name] for name in names}).attach(mod)


def run_pass(pass_fn, mod: tvm.IRModule, **options) -> tuple[tvm.IRModule, dict]:
    """(module after the pass without the vpuc attributes, audit JSON)."""
    out = pass_fn(named(mod), PassOptions(**options))
    return strip_audit(out), Audit.of(out).to_json()


def assert_rewrites_to(after: tvm.IRModule, expected: tvm.IRModule) -> None:
    tvm.ir.assert_structural_equal(after["main"], expected["main"])


def rng_array(shape, seed: int = 0, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype("float32")
