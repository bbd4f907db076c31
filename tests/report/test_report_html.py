"""The HTML builder of `vpuc report` on a hand-made artifact (conftest.py): the page holds
the JSON's own figures, the roofline figures computed by hand, refuses a run of another
artifact, and says what is missing instead of drawing empty charts."""

import json
from html.parser import HTMLParser

import pytest

from tests.report.conftest import REPORT, TRACE, run_of, save_artifact
from vpuc.runtime.report_html import ReportError, build_html, load_json
from vpuc.runtime.report_html.layout import layered_layout


class _Cells(HTMLParser):
    """Collects summary rows (data-key -> data-value), element ids and every src/href."""

    def __init__(self):
        super().__init__()
        self.summary, self.ids, self.links, self._key = {}, set(), [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for name in ("src", "href"):
            if name in attrs:
                self.links.append(attrs[name])
        if tag == "tr" and "data-key" in attrs:
            self._key = attrs["data-key"]
        elif tag == "td" and self._key:
            self.summary[self._key] = attrs["data-value"]
            self._key = None


def _parse(html):
    cells = _Cells()
    cells.feed(html)
    return cells


def test_summary_holds_the_json_figures(artifact):
    cells = _parse(build_html(artifact, run_of(artifact), TRACE))
    assert json.loads(cells.summary["report.vpu.total.cycles"]) == 1234
    assert json.loads(cells.summary["report.vpu.total.mac_utilization"]) == 0.25
    assert json.loads(cells.summary["report.partition.totals.bytes"]) == 16
    assert json.loads(cells.summary["run.cycles.link"]) == 150
    assert json.loads(cells.summary["run.host_ms"]) == 1.5
    assert {"graph", "layers", "roofline", "bars", "timeline", "trace-data"} <= cells.ids


def test_layer_row_roofline_from_the_report(artifact):
    """The bound is report.json's (targets/roofline.py; tests/lower/test_roofline.py checks it
    by hand): conv's 100 cycles, DRAM-bound; simulated 200 cycles -> 2x the bound, and
    2560 MACs / (200 * 256) = 5% MAC use."""
    html = build_html(artifact, run_of(artifact), TRACE)
    row = html.split('<table id="layers"')[1].split("<tr>")[2]
    assert 'data-value="100.0"' in row and 'data-value="2.0"' in row and 'data-value="0.05"' in row
    assert ">DRAM<" in row
    assert ">MAC<" in html.split('<table id="layers"')[1].split("<tr>")[3]


def test_self_contained(artifact):
    html = build_html(artifact, run_of(artifact), TRACE)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html
    assert _parse(html).links == []  # no src or href at all: the trace link's comes from a blob


def test_host_reason_reaches_the_page(artifact):
    html = build_html(artifact)
    ops = json.loads(html.split('id="ops-data">')[1].split("</script>")[0])
    assert ops[1]["reason"] == "Softmax is not in target u55-256's op set"


def test_run_of_another_artifact_is_refused_naming_both(tmp_path, artifact):
    other = save_artifact(tmp_path / "other.vpub", {**REPORT, "model": "other.onnx"})
    with pytest.raises(ReportError) as info:
        build_html(artifact, run_of(other), run_source="run.json")
    message = str(info.value)
    assert "run.json" in message and str(other) in message and str(artifact) in message


def test_without_a_run_says_what_is_missing(artifact):
    html = build_html(artifact)
    cells = _parse(html)
    assert "timeline" not in cells.ids and "timeline-missing" in cells.ids
    assert "no run given" in html and "run.cycles.total" not in cells.summary


def test_cpu_only_artifact_has_no_vpu_sections(tmp_path):
    ops = [{**op, "device": "cpu", "subgraph": None} for op in REPORT["ops"]]
    report = {"model": "hand.onnx", "totals": {"nodes": 3, "vpu_ops": 0, "cpu_ops": 3}, "ops": ops}
    path = save_artifact(tmp_path / "cpu.vpub", report, {"name": "cpu", "kind": "cpu"})
    html = build_html(path)
    cells = _parse(html)
    assert not {"graph", "layers", "roofline", "bars"} & cells.ids
    assert "all 3 ONNX ops run on the host CPU" in html
    assert json.loads(cells.summary["report.totals.cpu_ops"]) == 3


def test_bad_run_json_is_one_line(tmp_path):
    bad = tmp_path / "run.json"
    bad.write_text("{not json")
    with pytest.raises(ReportError, match=r"run\.json: not a run JSON \(invalid JSON"):
        load_json(bad, "run JSON")


def test_layout_layers_and_ordering():
    def op(name, inputs, outputs):
        return {"name": name, "inputs": inputs, "outputs": outputs}

    # a -> b -> d, a -> c -> d, plus a weight source w read only by d.
    ops = [op("a", ["x"], ["ta"]), op("b", ["ta"], ["tb"]), op("c", ["ta"], ["tc"]),
           op("w", [], ["tw"]), op("d", ["tb", "tc", "tw"], ["td"])]  # fmt: skip
    layout = layered_layout(ops)
    layers = {name: pos[0] for name, pos in layout.position.items()}
    assert layers == {"a": 0, "b": 1, "c": 1, "w": 1, "d": 2}  # w sits just above its reader
    assert layout.depth == 3 and layout.width == 3
    assert sorted(layout.edges) == sorted([("a", "b", "ta"), ("a", "c", "ta"), ("b", "d", "tb"),
                                           ("c", "d", "tc"), ("w", "d", "tw")])  # fmt: skip


def test_barycentre_uncrosses_two_chains():
    def op(name, inputs, outputs):
        return {"name": name, "inputs": inputs, "outputs": outputs}

    # Row 1 lists q before p, but p reads a (column 0) and q reads b (column 1).
    ops = [op("a", [], ["ta"]), op("b", [], ["tb"]), op("q", ["tb"], ["tq"]), op("p", ["ta"], ["tp"])]
    layout = layered_layout(ops)
    assert layout.position["p"][1] < layout.position["q"][1]


def test_cli_refusals_are_one_line_exit_2(tmp_path, artifact, vpuc):
    other = save_artifact(tmp_path / "other.vpub", {**REPORT, "model": "other.onnx"})
    run = tmp_path / "run.json"
    run.write_text(json.dumps(run_of(other)))
    done = vpuc("report", artifact, "--run", run, "-o", tmp_path / "r.html")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert str(other) in done.stderr and str(artifact) in done.stderr
    assert not (tmp_path / "r.html").exists()
    done = vpuc("report", artifact, "-o", tmp_path / "nowhere" / "r.html")
    assert done.returncode == 2 and "nowhere" in done.stderr and len(done.stderr.splitlines()) == 1
    for command in ("compile", "run"):  # refused before the compile or the run starts
        done = vpuc(command, artifact, "--html", tmp_path / "nowhere" / "r.html")
        assert done.returncode == 2 and "nowhere" in done.stderr and len(done.stderr.splitlines()) == 1
    done = vpuc("report", artifact, "-o", tmp_path / "r.html")
    assert done.returncode == 0 and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_vpu_node_carries_its_layer_figures(artifact):
    html = build_html(artifact, run_of(artifact), TRACE)
    ops = json.loads(html.split('id="ops-data">')[1].split("</script>")[0])
    assert "150 estimated cycles, 200 simulated, 2560 MACs, DRAM-bound" in ops[0]["figures"]
    assert ops[1]["figures"] is None  # the host op is in no VPU layer


def test_crossing_through_a_removed_op_is_the_red_edge():
    from vpuc.runtime.report_html.svg import graph_svg

    def op(name, device, subgraph, inputs, outputs):
        return {"name": name, "op": "X", "device": device, "subgraph": subgraph, "reason": "r",
                "inputs": inputs, "outputs": outputs}  # fmt: skip

    # a (VPU) -> t (a Transpose the passes removed) -> b (host): the boundary is a's tensor.
    ops = [
        op("a", "vpu", 0, ["x"], ["ta"]),
        op("t", "none", None, ["ta"], ["tt"]),
        op("b", "cpu", None, ["tt"], ["y"]),
    ]
    svg = graph_svg(ops, {"ta": 8})
    assert svg.count('class="edge crossing"') == 1 and svg.count('class="edge"') == 1
    assert svg.count(">8 B</text>") == 1
