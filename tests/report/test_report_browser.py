"""The HTML report in a real browser: headless Chromium (Debian's `chromium`, which .ci/run
installs) driven by playwright opens the page of resnet8 on u55-256 from a file. No console
error, no request leaves the page, the summary in the DOM is the JSON report's, clicking a
host node shows its reason, a screenshot is taken; the page is under 1 MB and loads in
under 1 s (a bound, not a figure). The CPU-only page of a zoo model shows no VPU sections."""

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESNET8 = REPO / "tests" / "fixtures" / "tf2onnx" / "tflite_resnet8.onnx"  # MLPerf Tiny resnet8, QDQ
CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def browser():
    assert CHROMIUM, "Debian's chromium is not installed: apt-get install -y chromium (.ci/run does)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def resnet8(tmp_path_factory, vpuc):
    out = tmp_path_factory.mktemp("report")
    art = out / "resnet8.vpub"
    done = vpuc("compile", RESNET8, "--target", "u55-256", "--no-reference", "-o", art, "--json",
                "--html", out / "compile.html")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    done = vpuc("run", art, "--json", "--trace", out / "trace.json", "--html", out / "run.html")
    assert done.returncode == 0, done.stderr
    (out / "run.json").write_text(done.stdout)
    done = vpuc(
        "report", art, "--run", out / "run.json", "--trace", out / "trace.json", "-o", out / "report.html"
    )
    assert done.returncode == 0, done.stderr
    return out, report, json.loads((out / "run.json").read_text())


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, [url for url in requests if url != path.as_uri()]


def _summary(page) -> dict:
    return page.evaluate(
        "Object.fromEntries(Array.from(document.querySelectorAll('#summary tr')).map("
        "r => [r.dataset.key, JSON.parse(r.cells[1].dataset.value || 'null')]))"
    )


def test_resnet8_report_in_chromium(browser, resnet8):
    out, report, run = resnet8
    path = out / "report.html"
    assert path.stat().st_size < 1_000_000
    page, errors, requests = _open(browser, path)
    assert errors == [] and requests == []
    load_ms = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
    assert load_ms < 1000, f"the page took {load_ms:.0f} ms to load"
    summary = _summary(page)
    total = report["vpu"]["total"]
    assert summary["report.vpu.total.cycles"] == total["cycles"]
    assert summary["report.vpu.total.mac_utilization"] == total["mac_utilization"]
    assert summary["report.partition.totals.bytes"] == report["partition"]["totals"]["bytes"]
    assert summary["report.totals.cpu_ops"] == report["totals"]["cpu_ops"]
    assert summary["run.cycles.total"] == run["cycles"]["total"]
    assert summary["run.transfer_bytes.to_vpu"] == run["transfer_bytes"]["to_vpu"]
    host = [op for op in report["partition"]["ops"] if op["device"] == "cpu"]
    assert host, "resnet8 on u55-256 keeps some op on the host"
    page.locator("#graph .node.cpu").first.click()
    details = page.locator("#details").inner_text()
    assert f"reason: {host[0]['reason']}" in details and host[0]["name"] in details
    page.locator("#graph .node.vpu").first.click()
    assert "figures: layer " in page.locator("#details").inner_text()  # its VPU layer's cycles
    assert page.locator("#timeline rect").count() > 0
    page.screenshot(path=str(out / "report.png"), full_page=False)
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page.close()


def test_compile_and_run_pages_open_cleanly(browser, resnet8):
    out, report, _ = resnet8
    for name in ("compile.html", "run.html"):
        page, errors, requests = _open(browser, out / name)
        assert errors == [] and requests == [], name
        assert _summary(page)["report.vpu.total.cycles"] == report["vpu"]["total"]["cycles"]
        page.close()


def test_cpu_only_page(browser, zoo_dir, tmp_path, vpuc):
    art = tmp_path / "tiny.vpub"
    done = vpuc("compile", zoo_dir / "tinyconvnet.onnx", "-o", art, "--json", "--html", tmp_path / "cpu.html")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    page, errors, requests = _open(browser, tmp_path / "cpu.html")
    assert errors == [] and requests == []
    assert page.locator("#graph, #layers, #roofline").count() == 0
    assert _summary(page)["report.totals.cpu_ops"] == report["totals"]["cpu_ops"]
    assert "no run given" in page.locator("#timeline-missing").inner_text()
    page.close()
