"""The quickstart in a real browser: JupyterLab on loopback, driven by Playwright in Chromium.

Runs the notebook's cells down to the `%%kernel_evolve` cell, then checks that the live dashboard
really renders there: the hypotheses panel fills in, a highlighted diff appears, the timing plot
image loads. Then it presses Stop and waits for the run to end stopped. Screenshots are kept in
test-artifacts/.

Needs Chromium (Debian: `apt-get install -y chromium`) and the Playwright package
(`pip install playwright`); Playwright's own browser download is not used.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kscience.record.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("KSCIENCE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
MAGIC_CELL = "%%kernel_evolve"

playwright_api = pytest.importorskip("playwright.sync_api", reason="the Playwright package is not installed "
                                                                   "(pip install playwright)")
pytest.importorskip("jupyterlab", reason="JupyterLab is not installed")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (apt-get install -y chromium)")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab server on 127.0.0.1 serving a copy of the quickstart, with news and update
    checks off (the network is closed and their pop-ups would cover the page)."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / "quickstart.ipynb", work / "quickstart.ipynb")
    settings = tmp_path / "lab-settings" / "@jupyterlab"
    for extension, name, values in (("apputils-extension", "notification", {"fetchNews": "false",
                                                                            "checkForUpdates": False}),
                                    # every cell in the page, so the test can find and run them
                                    ("notebook-extension", "tracker", {"windowingMode": "none"})):
        (settings / extension).mkdir(parents=True)
        (settings / extension / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    port, token = free_port(), "kscience-browser-test"
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "MPLBACKEND": "Agg",
           # the kernel imports kscience from this checkout, not from wherever it is installed
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    log = open(tmp_path / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}", "--LabApp.news_url=",
         "--ServerApp.port_retries=0", "--ServerApp.allow_root=True"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"JupyterLab did not start: {(tmp_path / 'jupyterlab.log').read_text()[-2000:]}")
            time.sleep(0.5)
    yield f"{base}/lab/tree/quickstart.ipynb?token={token}", work
    server.terminate()
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def test_the_dashboard_renders_in_jupyterlab_and_stop_ends_the_run(jupyterlab):
    url, work = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    cells = json.loads((work / "quickstart.ipynb").read_text())["cells"]
    magic = next(i for i, cell in enumerate(cells) if "".join(cell["source"]).startswith(MAGIC_CELL))
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1900})
        try:
            page.goto(url)
            # Wait for every cell and an idle kernel, then run the cells down to the magic cell.
            page.wait_for_function(f"document.querySelectorAll('.jp-Notebook .jp-Cell').length == {len(cells)}",
                                   timeout=120_000)
            page.get_by_text(re.compile(r"Python 3 \(ipykernel\) \| Idle")).wait_for(timeout=120_000)
            page.locator(".jp-Notebook .jp-Cell").nth(0).click()
            page.keyboard.press("Escape")  # command mode: Shift+Enter runs a cell and moves on
            for _ in range(magic + 1):
                page.keyboard.press("Shift+Enter")
            dashboard = page.locator(".kscience-dashboard")
            dashboard.wait_for(timeout=120_000)

            plot = dashboard.locator("img.kscience-plot")
            page.wait_for_function("img => img.complete && img.naturalWidth > 400", arg=plot.element_handle(),
                                   timeout=60_000)
            hypotheses = dashboard.locator(".kscience-hypotheses")
            hypotheses.get_by_text("Iteration 1").wait_for(timeout=240_000)
            assert "chosen" in hypotheses.inner_text() and "predicted" in hypotheses.inner_text()
            diff = dashboard.locator(".kscience-diffs .kscience-diff")
            diff.first.wait_for(timeout=240_000)
            assert "@@" in diff.first.inner_text()  # a unified diff, parent -> child
            assert diff.first.locator("span[style]").count() > 0  # syntax-highlighted
            dashboard.locator(".kscience-leaderboard").wait_for(timeout=240_000)
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-dashboard.png"))
            assert overflowing(page) == [], "a dashboard panel is wider than its box"

            dashboard.get_by_role("button", name="Stop").click()
            # The ended run replaces its widget by a static view, with the final status line.
            ended = page.locator(".kscience-dashboard.kscience-ended")
            ended.wait_for(timeout=240_000)
            status = ended.locator(".kscience-status").inner_text()
            page.screenshot(path=str(ARTIFACTS / "quickstart-stopped.png"), full_page=True)
            assert overflowing(page) == [], "a panel of the ended view is wider than its box"
            assert "settled so far" not in page.locator(".jp-Notebook").inner_text()  # no frozen copy

            # Save, end the kernel and reopen: the static view is what the saved notebook shows.
            page.keyboard.press("Control+s")
            deadline = time.monotonic() + 60
            while "kscience-ended" not in (work / "quickstart.ipynb").read_text() and time.monotonic() < deadline:
                time.sleep(0.5)
            shut_down_kernels(url)
            page.reload()
            reopened = page.locator(".kscience-dashboard.kscience-ended")
            reopened.wait_for(timeout=120_000)
            assert reopened.locator(".kscience-status").inner_text() == status
            assert "Error displaying widget" not in page.locator(".jp-Notebook").inner_text()
            reopened.screenshot(path=str(ARTIFACTS / "quickstart-reopened.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "quickstart-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    from kscience.record.store import Store

    with Store(work / "quickstart.db") as store:
        (run,) = store.list_runs()
        assert run.status == "stopped" and run.error is None
        snap = Snapshot.load(store, run.id)
    assert status == f"status stopped with {snap.iterations_complete} of {snap.target} iteration(s) complete"


OVERFLOWING = """() => [...document.querySelectorAll(
    '.kscience-dashboard .kscience-panel, .kscience-dashboard .kscience-leaderboard-panel, .kscience-summary')]
  .filter(el => el.scrollWidth > el.clientWidth + 1)
  .map(el => `${el.className.split(' ').filter(c => c.startsWith('kscience')).join('.')} `
             + `"${el.innerText.slice(0, 24)}": ${el.scrollWidth} > ${el.clientWidth}`)"""


def overflowing(page) -> list[str]:
    """The dashboard panels whose content is wider than the panel (cut off or pushed out)."""
    return page.evaluate(OVERFLOWING)


def shut_down_kernels(lab_url: str) -> None:
    """End every kernel of the server, as closing JupyterLab does: its widget models are gone then."""
    base, token = lab_url.split("/lab/")[0], lab_url.split("token=")[1]
    headers = {"Authorization": f"token {token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels", headers=headers)) as reply:
        kernels = json.load(reply)
    for kernel in kernels:
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{kernel['id']}", method="DELETE",
                                                      headers=headers)).close()
