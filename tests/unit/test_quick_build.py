"""The quantiser builds its in-process modules at a low LLVM optimisation level
(compat.build_host): their float results must be bit-identical with the default level's,
or calibration would depend on a compile-time shortcut."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.frontend import import_model
from vpuc.examples import zoo


def test_quick_build_gives_the_default_levels_bits():
    for name in ("resnet_mini", "transformer_encoder"):
        imported = import_model(zoo.build(name))
        shape, dtype = compat.tensor_type(imported.mod["main"].params[0])
        x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
        quick = compat.flatten_outputs(
            compat.virtual_machine(compat.build_host(imported.mod, "llvm"))["main"](compat.to_tvm(x))
        )
        full = compat.flatten_outputs(
            relax.VirtualMachine(relax.build(imported.mod, target=tvm.target.Target("llvm")), tvm.cpu())[
                "main"
            ](compat.to_tvm(x))
        )
        assert compat.QUICK_BUILD_OPT_LEVEL < 3
        for a, b in zip(quick, full, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
