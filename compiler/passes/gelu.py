"""Graph pass: GELU, exact (erf) and tanh-approximated, -> nn.gelu / nn.gelu_tanh.

    0.5 * x * (1 + erf(x / sqrt(2)))                                =>  nn.gelu(x)
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))         =>  nn.gelu_tanh(x)

Exporters write the product in any order and grouping (PyTorch: (x * (1 + erf)) * 0.5;
others: (0.5 * x) * (1 + erf), x * (0.5 * (1 + erf))), and x / sqrt(2) as x * 0.7071...
A dpl pattern per ordering would be a long list, so the matcher flattens the multiply tree
under the root into its factors and asks for exactly: one x, one (1 + erf(x / sqrt 2)) or
(1 + tanh(...)), and scalar constants whose product is 0.5. Likewise the tanh argument is
flattened into constants times (x + constants * x^3), x^3 being pow(x, 3) or x * x * x.
Those are the definitions of nn.gelu and nn.gelu_tanh, so the rewrite is exact up to float
rounding.

Near misses: a constant off its value ("attribute out of range": 0.5, sqrt(2),
sqrt(2/pi), 0.044715, relative tolerance 1e-5), an intermediate read elsewhere.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax

from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import DataflowView, Match, Rule, run_rules

PASS_NAME = "gelu"
REL_TOL = 1e-5
SQRT2 = math.sqrt(2.0)
TANH_SCALE = math.sqrt(2.0 / math.pi)
TANH_CUBIC = 0.044715


def _op(expr) -> str:
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else ""


def _factors(expr, var2val: dict, stop=None) -> list:
    """The leaves of the multiply tree under `expr` (stopping at `stop`)."""
    value = var2val.get(expr, expr) if isinstance(expr, relax.Var) else expr
    if (stop is not None and expr.same_as(stop)) or _op(value) != "relax.multiply":
        return [expr]
    return _factors(value.args[0], var2val, stop) + _factors(value.args[1], var2val, stop)


def _split(leaves: list, view: DataflowView):
    """(product of scalar constants, the other leaves)."""
    product, others = 1.0, []
    for leaf in leaves:
        value = view.scalar(leaf)
        if value is None:
            others.append(leaf)
        else:
            product *= value
    return product, others


def _one_plus(expr, var2val: dict, view: DataflowView):
    """(kind, inner) for add(erf(inner), 1) or add(tanh(inner), 1) in either order."""
    value = var2val.get(expr, expr) if isinstance(expr, relax.Var) else expr
    if _op(value) != "relax.add":
        return None
    for term, one in (value.args, value.args[::-1]):
        inner = var2val.get(term, term) if isinstance(term, relax.Var) else term
        if _op(inner) in ("relax.erf", "relax.tanh") and view.scalar(one) == 1.0:
            return _op(inner).split(".")[-1], inner.args[0]
    return None


def _erf_input(inner, var2val: dict, view: DataflowView):
    """(x, its scale) for inner = x / c or x * c; the scale should be 1/sqrt(2)."""
    value = var2val.get(inner, inner)
    if _op(value) == "relax.divide" and view.scalar(value.args[1]):
        return value.args[0], 1.0 / view.scalar(value.args[1])
    scale, others = _split(_factors(inner, var2val), view)
    return (others[0], scale) if len(others) == 1 else (None, None)


def _tanh_input(inner, var2val: dict, view: DataflowView):
    """(x, outer scale, cubic coefficient) for inner = c1 * (x + c2 * x^3)."""
    scale, others = _split(_factors(inner, var2val), view)
    total = var2val.get(others[0], others[0]) if len(others) == 1 else None
    if _op(total) != "relax.add":
        return None, None, None
    for x, cubic in (total.args, total.args[::-1]):
        coefficient, leaves = _split(_factors(cubic, var2val, stop=x), view)
        cubed = [var2val.get(leaf, leaf) for leaf in leaves]
        if all(leaf.same_as(x) for leaf in leaves) and len(leaves) == 3:
            return x, scale, coefficient
        if len(cubed) == 1 and _op(cubed[0]) == "relax.power" and cubed[0].args[0].same_as(x):
            if view.scalar(cubed[0].args[1]) == 3.0:
                return x, scale, coefficient
    return None, None, None


def _find_gelu(value, view: DataflowView, var2val: dict):
    """The found-dict for a GELU rooted at this multiply, or None."""
    if _op(value) != "relax.multiply":
        return None
    for leaf in _factors(value, var2val):
        found = _one_plus(leaf, var2val, view)
        if found is None:
            continue
        kind, inner = found
        if kind == "erf":
            x, inner_scale = _erf_input(inner, var2val, view)
            cubic = None
        else:
            x, inner_scale, cubic = _tanh_input(inner, var2val, view)
        if x is None:
            continue
        outer, others = _split(_factors(value, var2val, stop=x), view)
        rest = [o for o in others if not o.same_as(x) and not o.same_as(leaf)]
        if len(others) == 2 and not rest:
            return {"x": x, "kind": kind, "outer": outer, "inner": inner_scale, "cubic": cubic}
    return None


def _close(value: float, expected: float) -> bool:
    return abs(value - expected) <= REL_TOL * abs(expected)


def _check(match: Match) -> str | None:
    found = match.found
    if not _close(found["outer"], 0.5):
        return f"attribute out of range: the constant factor is {found['outer']:g}, not 0.5"
    if found["kind"] == "erf" and not _close(found["inner"], 1.0 / SQRT2):
        return f"attribute out of range: erf's input is x * {found['inner']:g}, not x / sqrt(2)"
    if found["kind"] == "tanh":
        if not _close(found["inner"], TANH_SCALE):
            return f"attribute out of range: tanh's scale is {found['inner']:g}, not sqrt(2/pi)"
        if not _close(found["cubic"], TANH_CUBIC):
            return f"attribute out of range: the cubic coefficient is {found['cubic']:g}, not 0.044715"
    return None


def _build(match: Match):
    x = match.found["x"]
    if match.found["kind"] == "erf":
        return relax.op.nn.gelu(x), None, "nn.gelu (erf form)"
    return relax.op.nn.gelu_tanh(x), None, "nn.gelu_tanh (tanh approximation)"


RULES = (Rule("gelu", _find_gelu, ("x",), _check, _build, needs=frozenset({"relax.multiply"})),)


def gelu(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """0.5 * x * (1 + erf(x / sqrt 2)) => nn.gelu(x); the tanh form => nn.gelu_tanh(x)."""
    return run_rules(mod, RULES, PASS_NAME)
