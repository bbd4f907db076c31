"""Every zoo model's VPU subgraphs, for vpu and vpu-plus, as the compiler emits them: each
program, simulated from its inputs, is bit-exact with the numpy int8 reference of its op
list; each layer is within 1 LSB of the QDQ reference (TVM evaluating the layer's
composite in float QDQ semantics, which equals onnxruntime on QDQ with optimisations off)
from the same int8 inputs; the compile-time estimate is within 4% of the simulated cycles.
The share of exact elements is printed (pytest -s)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower import vpu_functions
from vpuc.compiler.lower.reader.extract import extract_subgraph
from vpuc.examples import zoo
from vpuc.sim import Simulator

from .int8_reference import run_subgraph

TARGETS = ("vpu", "vpu-plus")


@pytest.fixture(
    scope="module", params=[(m, t) for t in TARGETS for m in zoo.MODELS], ids=lambda p: f"{p[0]}-{p[1]}"
)
def compiled(request, zoo_dir):
    name, target = request.param
    prepared = prepare_model(zoo_dir / f"{name}.onnx", target, CompileOptions(calib_synthetic=8))
    if not prepared.programs:
        # the cost model kept every subgraph on the host (the fitted host figures price the
        # transformer's small projections on `vpu` so): the code generator is tested on what
        # the op list gives it all the same
        assert all(v["decision"] == "cpu" for v in prepared.partition.report["profitability"]), name
        prepared = prepare_model(
            zoo_dir / f"{name}.onnx", target, CompileOptions(calib_synthetic=8, profitability=False)
        )
    return name, prepared


def _simulate(prepared, program, seed=0):
    """Random int8 inputs -> (inputs as the subgraph's Relax shapes say (NHWC), the simulator's
    result, outputs). An input the program takes channels-first (its DMA transposes it:
    compiler/lower/reader/edges.py) is written to DRAM as NCHW."""
    rng = np.random.default_rng(seed)
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    inputs = {}
    for b in program.inputs:
        x = rng.integers(-128, 128, b.shape).astype(np.int8)
        inputs[b.name] = x.transpose(0, 2, 3, 1) if b.layout == "NCHW" else x
        image[b.dram_address : b.dram_address + x.size] = x.reshape(-1).view(np.uint8)
    result = Simulator(prepared.target).run(program.program, image)
    outputs = {
        b.name: result.dram[b.dram_address : b.dram_address + int(np.prod(b.shape))]
        .view(np.int8)
        .reshape(b.shape)
        for b in program.outputs
    }
    return inputs, result, outputs


def test_programs_are_bit_exact_and_estimated_within_four_percent(compiled):
    name, prepared = compiled
    assert prepared.programs, f"{name}: no VPU program"
    provenance = prepared.quantized.provenance
    for (_, func), program in zip(vpu_functions(prepared.partition.mod), prepared.programs, strict=True):
        subgraph = extract_subgraph(func, program.symbol, provenance, program.index)
        inputs, result, outputs = _simulate(prepared, program)
        expected = run_subgraph(subgraph, inputs, prepared.target.numerics.requant)
        for out_name, got in outputs.items():
            np.testing.assert_array_equal(got, expected[out_name], err_msg=f"{name} {out_name}")
        ratio = program.estimate["cycles"] / result.stats.total_cycles
        print(f"{name} sg{program.index}: {result.stats.total_cycles} cycles, estimate/simulated {ratio:.3f}")
        assert 0.96 <= ratio <= 1.04


def _composites(func: relax.Function) -> dict[tuple[str, ...], relax.Function]:
    """Each composite of a VPU function, lifted to a standalone function, by its members."""
    standalone = func.without_attr("Codegen").with_attr("global_symbol", "main")
    mod = relax.transform.LambdaLift()(tvm.IRModule({"main": standalone}))
    found = {}
    for f in mod.functions.values():
        if f.attrs is not None and "Composite" in f.attrs:
            members = tuple(str(f.attrs["vars"]).split(","))
            found[members] = (
                f.without_attr("Composite").without_attr("vars").with_attr("global_symbol", "main")
            )
    return found


def _evaluate(func: relax.Function, args: list[np.ndarray]) -> np.ndarray:
    mod = relax.transform.LegalizeOps()(tvm.IRModule({"main": func}))
    vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy()


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_each_layer_within_one_lsb_of_the_qdq_reference(zoo_dir, name):
    # every layer the op list takes (the measured host figures keep transformer_encoder's
    # small subgraphs on the host; the layers are what this test is about)
    options = CompileOptions(calib_synthetic=8, profitability=False)
    prepared = prepare_model(zoo_dir / f"{name}.onnx", "vpu-plus", options)
    provenance = prepared.quantized.provenance
    checked = 0
    for (_, func), program in zip(vpu_functions(prepared.partition.mod), prepared.programs, strict=True):
        subgraph = extract_subgraph(func, program.symbol, provenance, program.index)
        inputs, _, _ = _simulate(prepared, program, seed=3)
        values = run_subgraph(subgraph, inputs, prepared.target.numerics.requant)
        composites = _composites(func)
        exact = total = 0
        for members, composite in composites.items():
            ops = [op for op in subgraph.ops if op.members == members]
            reference = _evaluate(composite, [values[a] for a in ops[-1].args])
            ours = values[ops[-1].output]
            diff = np.abs(reference.astype(np.int32) - ours.astype(np.int32))
            assert diff.max() <= 1, f"{name}: layer {ops[-1].name} differs by {diff.max()} LSB"
            exact, total, checked = exact + int((diff == 0).sum()), total + diff.size, checked + 1
        print(f"{name} sg{program.index}: {len(composites)} layers, {exact / total:.4%} of elements exact")
    assert checked > 0
