"""The executor: runs a loaded .vpub artifact, host graph on TVM's VM, VPU calls on the
simulator. An artifact without host code (every op on the VPU) has no host library: its
manifest lists the VPU calls in order (`host.calls`, docs/artifact.md) and the executor makes
them itself, on numpy arrays: such a run never imports TVM (1-2 s of a `vpuc run`).

Loading checks the manifest (manifest.py), registers one packed function per VPU program
(vpu.py) before the VM is created (the VM resolves `call_dps_packed` symbols then), and
instruments the VM so every host op's wall time is measured. `run(inputs)` returns the
outputs by graph name; `last_run` then holds what the run cost (stats.py, docs/metrics.md).

A call's fixed cost matters on small models (a whole run of the zoo's smallest is 40-60 us):
`run` looks the VM's entry function up once, accepts inputs that are already C-contiguous
arrays of the manifest's shapes and dtypes after a few attribute reads (anything else goes
through the full check), copies small inputs into tensors made once per Executable
(wrapping an array for TVM costs more than copying a few KiB), returns outputs as numpy
copies through DLPack, and builds `last_run` only when it is read.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vpuc.runtime.artifact import Artifact, ArtifactError
from vpuc.runtime.host_check import check_host_target
from vpuc.runtime.inputs import check_inputs
from vpuc.runtime.manifest import check_manifest
from vpuc.runtime.stats import HostOp, RunStats, run_stats
from vpuc.runtime.vpu import CallRecord, VpuCall
from vpuc.targets.host_cores import follow_load

if TYPE_CHECKING:  # imported where a host library is loaded: a run without one needs no TVM
    import tvm
    from tvm import relax

HOST_LIBRARY = "host.so"


class Executable:
    """A loaded artifact, ready to run; `run(inputs) -> outputs` by graph names."""

    def __init__(self, artifact: Artifact, source: str = "<artifact>", time_host_ops: bool = True) -> None:
        """`time_host_ops=False` leaves out the per-op wall times of `last_run` (a Python
        callback around every VM call: 2-4x the latency of a small model's run)."""
        self.artifact = artifact
        self.source = source
        self.target = check_manifest(artifact.manifest, artifact.members, source)
        check_host_target(artifact.manifest, source)
        self._calls: list[CallRecord] = []
        self._host_ops: list[HostOp] = []
        self.vpu_calls = [
            VpuCall(entry, artifact.members, self.target, source, self._calls)
            for entry in artifact.manifest.get("vpu_programs", [])
        ]
        self._last_run: RunStats | None = None
        self._run_record: tuple | None = None  # what `last_run` is built from, on first read
        self._staged: dict[str, tuple[np.ndarray, Any]] = {}  # input -> (buffer, its tensor)
        self._workdir = tempfile.TemporaryDirectory(prefix="vpuc-run-")
        self._open: dict[str, float] = {}
        self._deferred: relax.VirtualMachine | None = None
        self._time_host_ops = time_host_ops
        self._input_specs: list[tuple[str, tuple[int, ...], np.dtype]] | None = None  # `_exact_inputs`
        self._output_names = [spec["name"] for spec in artifact.outputs]
        self._plan = artifact.manifest["host"] if "calls" in artifact.manifest.get("host", {}) else None
        self._vm = None if self._plan else self._load_host(artifact, source)
        self._main = None if self._vm is None else self._vm["main"]

    def _load_host(self, artifact: Artifact, source: str) -> relax.VirtualMachine:
        """The host library on TVM's VM, the VPU calls' symbols registered first; TVM's
        thread pool started with the cores this process may use, of which each run uses
        those other processes leave idle (targets/host_cores.py: the library's load is the
        first window)."""
        from vpuc.targets.host_cores import FreeCores, start_pool, threads_chosen

        free = None if threads_chosen() else FreeCores()  # the first library of the process
        import tvm
        import tvm_ffi
        from tvm import relax

        library = Path(self._workdir.name) / HOST_LIBRARY
        if HOST_LIBRARY not in artifact.members:
            raise ArtifactError(f"{source}: no host library '{HOST_LIBRARY}' in the artifact")
        library.write_bytes(artifact.members[HOST_LIBRARY])
        for call in self.vpu_calls:
            tvm_ffi.register_global_func(call.symbol, call, override=True)
        try:
            module = tvm.runtime.load_module(str(library))
            vm = relax.VirtualMachine(module, tvm.cpu())
        except Exception as exc:  # TVM raises its own error types
            raise ArtifactError(f"{source}: host library does not load: {_first(exc)}") from None
        if self._time_host_ops:
            vm.set_instrument(tvm_ffi.convert(self._instrument))
        start_pool(free)  # before the first parallel kernel starts TVM's pool
        return vm

    @classmethod
    def load(cls, path: str | Path) -> Executable:
        return cls(Artifact.load(path), source=str(path))

    @property
    def inputs(self) -> list[dict[str, Any]]:
        return self.artifact.inputs

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return self.artifact.outputs

    def keep_traces(self, keep: bool = True) -> None:
        """Keep every VPU call's full simulation result (for `--trace`)."""
        for call in self.vpu_calls:
            call.keep_results = keep

    def record_outputs(self, keep: bool = True) -> None:
        """Keep every VPU call's int8 outputs (for `--check`)."""
        for call in self.vpu_calls:
            call.keep_outputs = keep

    @property
    def has_reference(self) -> bool:
        return "reference" in self.artifact.manifest

    def _reference_vm(self) -> relax.VirtualMachine:
        """The VM holding the reference: the host library's, or the deferred reference
        built (and cached) on first use (reference.py); TVM's pool set for the run to come."""
        follow_load()
        if "module" not in self.artifact.manifest["reference"]:
            return self._vm
        if self._deferred is None:
            from vpuc.runtime.reference import reference_vm

            self._deferred = reference_vm(self, self._workdir.name)
        return self._deferred

    def reference_run(self, inputs: dict[str, np.ndarray]) -> tuple[dict[int, list[np.ndarray]], dict]:
        """The QDQ reference on the host (the artifact's reference entry: the same graph, each
        VPU subgraph evaluated in float QDQ semantics by TVM), from the same model inputs:
        ({subgraph: its int8 outputs}, {model output name: value})."""
        spec = self.artifact.manifest["reference"]
        functions = {name: k for k, name in enumerate(spec["subgraphs"])}
        captured: dict[int, list[np.ndarray]] = {}

        def capture(func, symbol: str, before: bool, ret, *args) -> int:
            if not before and symbol in functions:
                captured[functions[symbol]] = [a.copy() for a in _flatten(ret)]
            return 0

        import tvm
        import tvm_ffi

        arrays = check_inputs(self.inputs, inputs, self.source)
        vm = self._reference_vm()
        vm.set_instrument(tvm_ffi.convert(capture))
        try:
            result = _flatten(
                vm[spec["entry"]](*[tvm.runtime.tensor(arrays[s["name"]]) for s in self.inputs])
            )
        finally:
            vm.set_instrument(
                tvm_ffi.convert(self._instrument) if self._time_host_ops and vm is self._vm else None
            )
        return captured, dict(zip([s["name"] for s in self.outputs], result, strict=True))

    def reference_subgraph(self, index: int, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """VPU subgraph `index`'s QDQ reference (its host copy in float QDQ semantics) on the
        int8 inputs a VPU call received; an input the program takes channels-first (its DMA
        transposes it) is given to the reference as the graph has it, NHWC."""
        import tvm

        spec = self.artifact.manifest["reference"]
        entry = next(c for c in self.vpu_calls if c.subgraph == index)
        args = []
        for binding, array in zip(entry.inputs, inputs, strict=True):
            if binding.get("layout") == "NCHW" and array.ndim == 4:
                array = np.ascontiguousarray(array.transpose(0, 2, 3, 1))
            args.append(tvm.runtime.tensor(array))
        vm = self._reference_vm()
        vm.set_instrument(None)
        try:
            name = next(n for n in spec["subgraphs"] if n.endswith(f"sg{index}"))
            return [a.copy() for a in _flatten(vm[name](*args))]
        finally:
            if self._time_host_ops and vm is self._vm:
                import tvm_ffi

                self._vm.set_instrument(tvm_ffi.convert(self._instrument))

    def reference_layer(self, function: str, args: list[np.ndarray]) -> np.ndarray | None:
        """One layer's QDQ reference (its composite in float QDQ semantics) on int8 operands
        in their Relax shapes; None when the reference module lacks the function."""
        import tvm

        vm = self._reference_vm()
        vm.set_instrument(None)
        try:
            try:
                run = vm[function]
            except (AttributeError, KeyError, RuntimeError, ValueError):  # TVM's missing-function errors
                return None
            # np.asarray(order="C"), not np.ascontiguousarray: that makes a 0-d operand (a
            # scalar Mul's) 1-d, which the function's shape check refuses
            return _flatten(run(*[tvm.runtime.tensor(np.asarray(a, order="C")) for a in args]))[0].copy()
        finally:
            if self._time_host_ops and vm is self._vm:
                import tvm_ffi

                self._vm.set_instrument(tvm_ffi.convert(self._instrument))

    @property
    def last_run(self) -> RunStats | None:
        """What the last `run` cost (None before the first)."""
        if self._run_record is not None:
            self._last_run = run_stats(self.target, self.vpu_calls, *self._run_record)
            self._run_record = None
        return self._last_run

    def run(self, inputs: dict[str, np.ndarray], source: str | None = None) -> dict[str, np.ndarray]:
        """Run once; inputs are checked against the manifest (names, shapes, dtypes) and an
        error names `source` (where the inputs came from) or else the artifact. The outputs
        are new arrays, never shared with the caller's inputs or another run's outputs.

        One call at a time per Executable: small inputs are staged in tensors it keeps
        between calls (`_stage`), so threads that run a model concurrently need one
        Executable each."""
        arrays = self._exact_inputs(inputs)
        if arrays is None:  # anything else: the full check, its conversions and its messages
            checked = check_inputs(self.inputs, inputs, source or self.source)
            arrays = [checked[spec["name"]] for spec in self.inputs]
        self._calls.clear()
        self._host_ops = []
        started = time.perf_counter()
        if self._main is not None:
            specs = self.inputs
            tensors = [self._stage(spec["name"], array) for spec, array in zip(specs, arrays, strict=True)]
            follow_load()  # the pool's threads for this run: what other processes leave idle
            result = _flatten(self._main(*tensors))
        else:
            result = self._run_calls(arrays)
        wall = time.perf_counter() - started
        names = self._output_names
        if len(result) != len(names):
            raise ArtifactError(
                f"{self.source}: host graph returned {len(result)} outputs, manifest lists {len(names)}"
            )
        self._run_record = (list(self._calls), self._host_ops, started, wall)
        return dict(zip(names, result, strict=True))

    def _exact_inputs(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray] | None:
        """The inputs in manifest order when each is already what `check_inputs` would return
        (a C-contiguous ndarray of the manifest's shape and dtype, and no other names); else
        None. The common case costs a few attribute reads instead of the full check's 6 us."""
        specs = self._input_specs
        if specs is None:
            try:
                specs = self._input_specs = [
                    (spec["name"], tuple(spec["shape"]), np.dtype(spec["dtype"])) for spec in self.inputs
                ]
            except TypeError:  # a dtype numpy does not know yet (ml_dtypes' before its import)
                return None
        if type(inputs) is not dict or len(inputs) != len(specs):
            return None
        arrays = []
        for name, shape, dtype in specs:
            array = inputs.get(name)
            if type(array) is not np.ndarray or array.shape != shape or array.dtype != dtype:
                return None
            if not array.flags.c_contiguous:
                return None
            arrays.append(array)
        return arrays

    def _stage(self, name: str, array: np.ndarray) -> tvm.runtime.Tensor:
        """`array` as a TVM tensor: copied into this input's own aligned buffer when it is at
        most STAGE_MAX_BYTES (0.3 us against 3.5 us to wrap a new tensor), else wrapped
        without a copy (`_to_tvm`). The buffer is reused by the next call."""
        staged = self._staged.get(name)
        if staged is not None and staged[0].shape == array.shape and staged[0].dtype == array.dtype:
            staged[0][...] = array  # 0.8 us against np.copyto's 2.5 us
            return staged[1]
        if array.nbytes > STAGE_MAX_BYTES or array.size == 0 or not _dlpack_carries(array.dtype):
            return _to_tvm(array)  # a dtype DLPack does not carry (bfloat16) is copied by TVM
        if staged is None or staged[0].shape != array.shape or staged[0].dtype != array.dtype:
            buffer = _aligned_empty(array.shape, array.dtype)
            staged = self._staged[name] = (buffer, _to_tvm(buffer))
        staged[0][...] = array
        return staged[1]

    def _run_calls(self, args: list[np.ndarray]) -> list[np.ndarray]:
        """The manifest's VPU calls in order, without a host library (docs/artifact.md):
        each writes its outputs into arrays made here; the returned ones are the outputs."""
        by_symbol = {call.symbol: call for call in self.vpu_calls}
        written: list[list[np.ndarray]] = []

        def value(ref: dict[str, int]) -> np.ndarray:
            return args[ref["input"]] if "input" in ref else written[ref["call"]][ref["output"]]

        for call in self._plan["calls"]:
            outputs = [np.empty(spec["shape"], spec["dtype"]) for spec in call["outputs"]]
            by_symbol[call["symbol"]](*[value(ref) for ref in call["args"]], *outputs)
            written.append(outputs)
        return [np.array(value(ref)) for ref in self._plan["returns"]]  # copies, as the VM's

    def _instrument(self, func, symbol: str, before: bool, ret, *args) -> int:
        now = time.perf_counter()
        if before:
            self._open[symbol] = now
        elif symbol in self._open:
            self._host_ops.append(HostOp(symbol, self._open.pop(symbol), now))
        return 0


TVM_ALIGNMENT = 64  # bytes; TVM's kernels are compiled assuming it
STAGE_MAX_BYTES = 64 * 1024  # inputs up to this size are copied into a kept tensor (`_stage`)


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + TVM_ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % TVM_ALIGNMENT
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


def _dlpack_carries(dtype: np.dtype) -> bool:
    """Whether numpy exports `dtype` through DLPack, so that `_to_tvm` is a view of the
    array's memory (a staged buffer must be one: it is filled after it is wrapped). numpy
    refuses extension dtypes such as ml_dtypes' bfloat16, which TVM then copies."""
    return np.dtype(dtype).kind in "biufc"


def _to_tvm(array: np.ndarray) -> tvm.runtime.Tensor:
    """A tensor over the array's memory (DLPack, no copy), or over an aligned copy when the
    array is not 64-byte aligned. tvm.runtime.tensor copies through a slow path: 30 us per
    call, as long as a whole small model's run. An empty array goes by copy: numpy gives it
    strides TVM's compactness check refuses (ONNX's node tests with a zero-size input)."""
    import tvm

    if array.size == 0:
        return tvm.runtime.tensor(np.ascontiguousarray(array))
    if array.ctypes.data % TVM_ALIGNMENT or not array.flags["C_CONTIGUOUS"]:
        aligned = _aligned_empty(array.shape, array.dtype)
        aligned[...] = array
        array = aligned
    try:
        return tvm.runtime.from_dlpack(array)
    except (RuntimeError, TypeError, BufferError):  # a dtype DLPack does not carry
        return tvm.runtime.tensor(array)


def _flatten(value) -> list[np.ndarray]:
    """The tensors in a VM result (a tensor or nested tuples of them) as numpy copies."""
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        try:  # through DLPack: 0.5 us against Tensor.numpy()'s 5 us
            return [np.from_dlpack(value).copy()]
        except (RuntimeError, TypeError, BufferError, ValueError):  # a dtype DLPack does not carry
            return [value.numpy()]
    return [array for item in value for array in _flatten(item)]


def _first(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
