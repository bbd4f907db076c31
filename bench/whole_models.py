"""Whole models on the VPU (issue 20): per model and target, what runs where and what it costs.

    .venv/bin/python bench/whole_models.py [--anchors DIR] [--out NAME]

For the anchors (../shared/anchors: tinyconv and resnet8, NHWC and NCHW QDQ exports) and the
TFLite-converted DS-CNN and MobileNet-V1 0.25 (tests/fixtures/tf2onnx, float and int8 I/O),
on vpu, vpu-plus and u55-256: `vpuc compile --json`'s summary (host ops, MAC share, VPU
cycles, link bytes) and `vpuc run --json`'s end_to_end (modelled latency and its host part;
docs/metrics.md). Writes bench/out/<NAME>.json (default whole_models).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import write_json

REPO = Path(__file__).resolve().parents[1]
ANCHORS = REPO.parent / "shared" / "anchors"
FIXTURES = REPO / "tests" / "fixtures" / "tf2onnx"


def models(anchors: Path) -> dict[str, Path]:
    return {
        "tinyconv_nhwc": anchors / "tinyconv" / "tinyconv_int8_qdq.onnx",
        "tinyconv_nchw": anchors / "tinyconv" / "tinyconv_int8_qdq_nchw.onnx",
        "resnet8_nhwc": anchors / "resnet8" / "resnet8_int8_qdq.onnx",
        "resnet8_nchw": anchors / "resnet8" / "resnet8_int8_qdq_nchw.onnx",
        "dscnn": FIXTURES / "tflite_dscnn.onnx",
        "dscnn_int8io": FIXTURES / "tflite_dscnn_int8io.onnx",
        "mobilenet": FIXTURES / "tflite_mobilenet.onnx",
        "mobilenet_int8io": FIXTURES / "tflite_mobilenet_int8io.onnx",
    }


TARGETS = ("vpu", "vpu-plus", "u55-256")
VPUC = Path(sys.executable).with_name("vpuc")


def _json(args: list[str]) -> dict:
    done = subprocess.run([str(VPUC), *args, "--json"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def measure(model: Path, target: str, workdir: Path) -> dict:
    artifact = workdir / f"{model.stem}-{target}.vpub"
    report = _json(["compile", str(model), "--target", target, "-o", str(artifact)])
    summary = report["summary"]
    end_to_end = _json(["run", str(artifact)])["end_to_end"]
    programs = (report.get("vpu") or {}).get("subgraphs", [])
    return {
        "host_ops": summary["host_ops"],
        # an NCHW input the host transposes for a program: host work that is no ONNX node
        "host_input_transposes": sum(
            p.get("input_transpose", "").startswith("on the host") for p in programs
        ),
        "vpu_mac_share": round(summary["vpu_mac_share"], 4),
        "vpu_cycles": summary["vpu_cycles"],
        "link_bytes": summary["link_bytes"],
        "end_to_end_us": end_to_end["total_modelled_us"],
        "host_us": end_to_end["host_modelled_us"],
        "link_us": end_to_end["link_us"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchors", type=Path, default=ANCHORS, help="default: ../shared/anchors")
    parser.add_argument("--out", default="whole_models")
    args = parser.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="vpuc-whole-") as workdir:
        for name, path in models(args.anchors).items():
            if not path.exists():
                print(f"{name}: {path} not found, skipped")
                continue
            for target in TARGETS:
                row = measure(path, target, Path(workdir))
                figures[f"{name}/{target}"] = row
                print(
                    f"{name:18s} {target:9s} host ops {row['host_ops']:2d} "
                    f"(+{row['host_input_transposes']} input transposes)  MACs on VPU "
                    f"{row['vpu_mac_share']:6.1%}  VPU {row['vpu_cycles']:8d} cycles  link "
                    f"{row['link_bytes']:6d} B  end to end {row['end_to_end_us']:8.2f} us "
                    f"(host {row['host_us']:.2f} us)",
                    flush=True,
                )
    print(f"wrote {write_json(args.out, figures)}")


if __name__ == "__main__":
    main()
