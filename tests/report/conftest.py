"""A hand-made artifact for the HTML report's tests: a manifest and a report.json whose
figures are written here, so each expected value comes from this file, not the builder."""

import json

import pytest

from vpuc.runtime.artifact import Artifact

HARDWARE = {"clock_mhz": 500, "mac_rows": 16, "mac_cols": 16, "dram_bytes_per_cycle": 8}


def _op(name, op, device, subgraph, reason, inputs, outputs):
    return {"name": name, "op": op, "device": device, "subgraph": subgraph, "reason": reason,
            "inputs": inputs, "outputs": outputs}  # fmt: skip


OPS = [
    _op("conv", "Conv", "vpu", 0, "vpu.conv2d_bias_q in VPU subgraph 0", ["x", "w"], ["c"]),
    _op("soft", "Softmax", "cpu", None, "Softmax is not in target u55-256's op set", ["c"], ["s"]),
    _op("fc", "Gemm", "vpu", 1, "vpu.dense_q in VPU subgraph 1", ["s"], ["y"]),
]
REPORT = {
    "model": "hand.onnx",
    "totals": {"nodes": 3, "vpu_ops": 2, "cpu_ops": 1},
    "ops": OPS,
    "partition": {
        "target": "u55-256", "ops": OPS, "subgraphs": [{"id": 0, "ops": ["conv"]}, {"id": 1, "ops": ["fc"]}],
        "boundaries": [
            {"direction": "VPU->CPU", "tensor": "c", "producer": "conv", "consumer": "soft", "shape": [1, 8],
             "dtype": "int8", "bytes": 8},
            {"direction": "CPU->VPU", "tensor": "s", "producer": "soft", "consumer": "fc", "shape": [1, 8],
             "dtype": "int8", "bytes": 8},
        ],
        "totals": {"vpu_ops": 2, "cpu_ops": 1, "subgraphs": 2, "boundaries": 2, "bytes": 16},
        "raw_totals": {"vpu_ops": 2, "cpu_ops": 1, "subgraphs": 2, "boundaries": 2, "bytes": 16},
        "profitability": [],
    },
    "vpu": {
        "total": {"cycles": 1234, "macs": 2560, "dram_read_bytes": 700, "dram_write_bytes": 100,
                  "weight_bytes": 64, "sram_peak_bytes": 4096, "mac_utilization": 0.25},
        "subgraphs": [],
        "layers": [
            {"subgraph": 0, "id": 1, "name": "conv", "op": "conv2d", "nodes": ["conv"], "macs": 2560,
             "estimate_cycles": 150, "dram_read_bytes": 700, "dram_write_bytes": 100, "tiling": {},
             "roofline": {"bound_cycles": 100.0, "bound_by": "DRAM"}},
            {"subgraph": 1, "id": 1, "name": "fc", "op": "dense", "nodes": ["fc"], "macs": 25600,
             "estimate_cycles": 90, "dram_read_bytes": 8, "dram_write_bytes": 8, "tiling": {},
             "roofline": {"bound_cycles": 100.0, "bound_by": "MAC"}},
        ],
    },
    "accuracy": {"outputs": [{"name": "y", "sqnr_db": 31.5}], "layers": [{"name": "conv", "sqnr_db": 29.25}]},
}  # fmt: skip
RUN_LAYERS = [
    {"subgraph": 0, "name": "conv", "op": "conv2d", "cycles": 200, "macs": 2560},
    {"subgraph": 1, "name": "fc", "op": "dense", "cycles": 100, "macs": 25600},
]
TRACE = {
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "host CPU"}},
        {"ph": "X", "name": "softmax", "pid": 1, "tid": 1, "ts": 0.0, "dur": 5.0, "args": {}},
        {"ph": "X", "name": "to VPU sg0", "pid": 2, "tid": 1, "ts": 5.0, "dur": 1.0, "args": {}},
    ]
}


def save_artifact(path, report=REPORT, target=None):
    manifest = {
        "inputs": [{"name": "x", "shape": [1, 8], "dtype": "float32"}],
        "outputs": [{"name": "y", "shape": [1, 8], "dtype": "float32"}],
        "target": target or {"name": "u55-256", "kind": "vpu", "hardware": HARDWARE},
    }
    Artifact(manifest=manifest, members={"report.json": json.dumps(report).encode()}).save(path)
    return path


def run_of(path, **extra):
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"artifact": {"path": str(path), "sha256": digest}, "outputs": [], "check": None,
            "cycles": {"total": 450, "vpu": 300, "link": 150}, "subgraphs": [], "layers": RUN_LAYERS,
            "transfer_bytes": {"to_vpu": 16, "from_vpu": 8}, "host_ms": 1.5, **extra}  # fmt: skip


@pytest.fixture
def artifact(tmp_path):
    return save_artifact(tmp_path / "hand.vpub")
