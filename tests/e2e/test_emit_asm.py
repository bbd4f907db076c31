"""`vpuc compile --emit-asm DIR` writes each VPU program as assembly that `vpuc asm` turns
back into the very bytes the artifact carries."""

from __future__ import annotations

import zipfile


def test_emitted_assembly_assembles_to_the_artifacts_program(vpuc, zoo_dir, tmp_path):
    artifact, folder = tmp_path / "o.vpub", tmp_path / "asm"
    compiled = vpuc("compile", zoo_dir / "opzoonet.onnx", "--target", "vpu-plus", "-o", artifact,
                    "--emit-asm", folder, "--calib-synthetic", "8", "--no-reference")  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    sources = sorted(folder.glob("sg*.s"))
    assert sources
    with zipfile.ZipFile(artifact) as zf:
        for source in sources:
            binary = tmp_path / f"{source.stem}.bin"
            assembled = vpuc("asm", source, "-o", binary)
            assert assembled.returncode == 0, assembled.stderr
            assert binary.read_bytes() == zf.read(f"vpu/{source.stem}.bin")
            assert ".layer" in source.read_text()  # layers named after their ONNX nodes
