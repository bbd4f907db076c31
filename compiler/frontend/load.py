"""Frontend step 1: read an ONNX model (path or ModelProto) and run onnx.checker.

Every failure becomes a FrontendError whose message starts with the model's name, so the CLI
prints one line such as `bad.onnx: not an ONNX model (protobuf parse failed)`.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from vpuc.compiler.errors import FrontendError


def load_model(source: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Return (checked model, display name). External data next to the file is loaded."""
    if isinstance(source, onnx.ModelProto):
        model, name = source, source.graph.name or "<model>"
        _check_no_unloaded_external_data(model, name)
    else:
        model, name = read_onnx_file(Path(source)), str(source)
    _check_is_model(model, name)
    _check_opset(model, name)
    _run_checker(model, name)
    return model, name


def _check_opset(model: onnx.ModelProto, name: str) -> None:
    """An opset newer than the installed onnx knows compiles to nothing checkable: refuse it."""
    known = onnx.defs.onnx_opset_version()
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > known:
            raise FrontendError(
                f"{name}: imports ONNX opset {opset.version}; onnx {onnx.__version__} knows up to "
                f"opset {known}"
            )


def check_model_path(path: str | Path) -> None:
    """A FrontendError when there is no file to read at `path` (the CLI asks before its
    compiler imports: an error without TVM's import)."""
    path = Path(path)
    if not path.exists():
        raise FrontendError(f"{path}: no such file")
    if path.is_dir():
        raise FrontendError(f"{path}: is a directory, not an ONNX file")


def read_onnx_file(path: Path, external_data: bool = True) -> onnx.ModelProto:
    """The model in a file, or a FrontendError naming the file and what is wrong with it;
    `external_data`: also read the tensors kept in files beside it."""
    check_model_path(path)
    try:
        return onnx.load(str(path), load_external_data=external_data)
    except DecodeError as exc:
        raise FrontendError(f"{path}: not an ONNX model (protobuf parse failed: {exc})") from None
    except FileNotFoundError as exc:
        raise FrontendError(f"{path}: external data file missing: {exc.filename}") from None
    except onnx.checker.ValidationError as exc:  # raised for unreadable external data
        raise FrontendError(f"{path}: cannot load external data: {_one_line(exc)}") from None
    except (ValueError, OSError, RuntimeError) as exc:
        raise FrontendError(f"{path}: cannot load: {_one_line(exc)}") from None


def _check_is_model(model: onnx.ModelProto, name: str) -> None:
    if model.ir_version == 0 or not model.HasField("graph"):
        raise FrontendError(f"{name}: not an ONNX model (no ir_version or no graph)")
    if not model.graph.output:
        raise FrontendError(f"{name}: graph has no outputs")


def _check_no_unloaded_external_data(model: onnx.ModelProto, name: str) -> None:
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL and not tensor.raw_data:
            raise FrontendError(
                f"{name}: initializer '{tensor.name}' keeps its data in an external file; "
                "pass the model's path (or onnx.load it with load_external_data=True)"
            )


def _run_checker(model: onnx.ModelProto, name: str) -> None:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise FrontendError(f"{name}: invalid ONNX graph: {_one_line(exc)}") from None
    except ValueError as exc:  # > 2 GiB protos and similar
        raise FrontendError(f"{name}: cannot check: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    """An exception message folded onto one line (the checker's context lines included)."""
    lines = [line.strip().removeprefix("==> Context:").strip() for line in str(exc).splitlines()]
    text = "; ".join(line for line in lines if line)
    return text or type(exc).__name__
