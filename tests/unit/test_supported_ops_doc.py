"""docs/SUPPORTED_OPS.md is generated from the targets and the constraint docstrings."""

from pathlib import Path

from vpuc.targets.docgen import supported_ops_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "SUPPORTED_OPS.md"


def test_supported_ops_doc_is_current():
    assert DOC.read_text() == supported_ops_markdown(), (
        "docs/SUPPORTED_OPS.md is stale: run `python -m vpuc.targets.docgen > docs/SUPPORTED_OPS.md`"
    )


def test_doc_has_every_listed_op_and_its_reasons():
    text = supported_ops_markdown()
    assert "| `conv2d` | Conv | mac | Kernel height and width must be between 1 and 7;" in text
    assert "Stride must be between 1 and 3 in both H and W" in text
    assert "`sigmoid`" in text.split("## Target `vpu-plus`")[1].split("Not on this")[0]
