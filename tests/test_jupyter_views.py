"""The views of a run: widget dashboard (and its Stop button), text summary, plots and report.

Widgets are built without a frontend (their comms go nowhere), which is enough to check what
each panel would show; tests/browser checks that JupyterLab really renders them.
"""

import copy
import dataclasses
import itertools
import shutil
import struct
import subprocess
import sys
import threading
import time

import pytest

from jupyter_fakes import REFERENCE_US, fake_kernel, fake_run_class
from kscience.jupyter import launch, open_run, panels
from kscience.jupyter.dashboard import Dashboard
from kscience.jupyter.headless import LATEST_SHOWN, TextSummary, summary_text
from kscience.jupyter.live import Throttle, choose_view
from kscience.jupyter.plots import draw_timeline, lineage_layout, timeline_figure
from kscience.jupyter.report import ReportError, write_figures
from kscience.jupyter.results import RunResult
from kscience.record.snapshot import Snapshot
from kscience.record.store import Store
from kscience.run.events import CandidateEvaluated
from kscience.run.log import LogTail
from kscience.record.candidate import Candidate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def fakes(monkeypatch):
    monkeypatch.setattr(launch, "Run", fake_run_class())
    monkeypatch.delenv("KSCIENCE_VIEW", raising=False)


def finished_run(tmp_path, iterations=2) -> RunResult:
    return launch.evolve("softmax", fake_kernel(100.0), iterations=iterations, llm="offline",
                         db=tmp_path / "k.db", view="text")


def png_size(data) -> tuple[int, int]:
    data = bytes(data)
    assert data.startswith(PNG_MAGIC)
    return struct.unpack(">II", data[16:24])


def test_the_dashboard_shows_every_panel_of_a_finished_run(tmp_path, capsys):
    run = finished_run(tmp_path)
    board = Dashboard(run)
    snap = run.snapshot()
    assert "kscience run " + run.id in board.header.value and "fake device" in board.header.value
    assert "finished with 2 of 2 iteration(s) complete" in board.stage.value
    assert board.progress.value == board.progress.max == 2 and board.progress.bar_style == "success"
    assert png_size(board.plot.value)[0] > 400
    hypotheses = board.hypotheses.value
    for text in ("Iteration 2", "Iteration 1", "faster because the profile says so", "chosen as scripted",
                 "not chosen", "+25.0%</b></span> measured (inside the prediction)", "predicted +5% to +30%",
                 "write_failed", "finding: faster: ok", "finding: broken: write_failed"):
        assert text in hypotheses
    leaderboard = board.leaderboard.value
    assert leaderboard.index(run.best.id) < leaderboard.index(run.seed.id)  # ranked fastest first
    assert "1.56x" in leaderboard and "0.625x" in leaderboard  # 100/64 vs seed, 40/64 vs reference
    assert run.best.id + " 64.0 us ★" in board.lineage.value
    # The log shows what the terminal prints, repairs and writes that produced no kernel included.
    log = board.log.value
    assert "repairing c-" in log and "(wrong_answer), attempt 1 of 2" in log
    assert "write_failed" in log and "repair 1: broken" in log and "no fix found" in log
    # The diff viewer follows the newest candidate; picking another shows its diff or error.
    ids = [value for _, value in board.picker.options]
    assert board.picker.value == ids[0] and len(ids) == len(snap.candidates) - 1  # all but the reference
    board.picker.value = run.best.id
    assert "kscience-diff" in board.diff.value and "TIME_US" in board.diff.value and "80.0" in board.diff.value
    broken = next(c for c in snap.candidates if c.status == "wrong_answer")
    board.picker.value = broken.id
    assert "kscience-error" in board.diff.value and "AssertionError: mismatch" in board.diff.value
    assert "failing shape: m=8" in board.diff.value
    board.render()  # a redraw keeps the user's pick
    assert board.picker.value == broken.id
    assert board.stop_button.disabled


def test_stop_ends_a_live_run_cleanly_after_the_current_evaluation(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "Run", fake_run_class(delay_s=0.3))
    run = launch.new_run("softmax", fake_kernel(100.0), iterations=50, llm="offline", db=tmp_path / "k.db")
    board = Dashboard(run, refresh_s=0.1)
    run.start()
    deadline = time.monotonic() + 60
    while len(run.snapshot().settled) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.live and not board.stop_button.disabled
    board.stop_button.click()
    # The line says a stop is pending, unless the run has already ended in between.
    assert board.stop_button.disabled and ("stop requested" in board.stage.value or "stopped" in board.stage.value)
    # The final redraw runs on the run's thread before it ends, so it is done once wait returns.
    assert run.wait(timeout=30) == "stopped" and not run.live
    assert "stopped with " in board.stage.value and board.progress.bar_style == "warning"
    snap = run.snapshot()
    assert snap.iterations_done < 50 and all(c.status != "pending" for c in snap.candidates[:-1])


def test_redraws_are_throttled_but_the_last_change_is_always_drawn():
    calls = []
    throttle = Throttle(lambda: calls.append(time.monotonic()), interval_s=0.2)
    start = time.monotonic()
    while time.monotonic() - start < 0.6:
        throttle.poke()
        time.sleep(0.005)
    last_poke = time.monotonic()
    time.sleep(0.5)
    assert 2 <= len(calls) <= 5
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(calls))
    assert calls[-1] >= last_poke - 0.2


def test_widgets_only_in_a_kernel_a_jupyter_server_started(monkeypatch):
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert choose_view() == "text"  # no kernel at all here
    assert choose_view("widgets") == "widgets"
    import IPython

    kernel_shell = type("KernelShell", (), {"kernel": object()})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: kernel_shell)
    assert choose_view() == "text"  # a kernel nbclient started: papermill, nbconvert
    monkeypatch.setenv("JPY_SESSION_NAME", "/work/quickstart.ipynb")
    assert choose_view() == "widgets"  # a kernel JupyterLab started
    monkeypatch.setenv("KSCIENCE_VIEW", "text")
    assert choose_view() == "text"
    with pytest.raises(ValueError, match="unknown view"):
        choose_view("fancy")


def test_the_text_summary_follows_the_run_and_ends_with_the_command_line_table(tmp_path, capsys):
    run = launch.new_run("softmax", fake_kernel(100.0), iterations=1, llm="offline", db=tmp_path / "k.db")
    summary = TextSummary(run, refresh_s=0.05)
    # What a refresh would draw at each verdict, taken while the run goes: a run this quick (the fake executor
    # judges in milliseconds) may end between two of block()'s refreshes, so none of those need fall mid-run.
    drawn_running = []
    run.follow(lambda event: drawn_running.append(summary.text()) if isinstance(event, CandidateEvaluated) else None)
    summary.show()
    run.start()
    summary.block()
    out = capsys.readouterr().out
    assert f"kscience run {run.id} (softmax)" in out and "now:    " in out
    assert out.rstrip().endswith("LLM                    no model calls")
    assert f"best {run.best.id}" in summary.text() and "repair success" in summary.text()
    # while it runs, its newest log lines are the terminal's: the failed repair among them
    assert drawn_running and all("  now:    " in text and "  log:" in text for text in drawn_running)
    running = summary_text(run.snapshot(), log=LogTail(run.store, run.id, LATEST_SHOWN).lines())
    assert "write_failed" in running and "no fix found" in running, running


def test_a_run_driven_by_another_store_is_followed_through_its_events(tmp_path):
    run = launch.new_run("softmax", fake_kernel(100.0), iterations=2, llm="offline", db=tmp_path / "k.db")
    follower = open_run(run.id, db=tmp_path / "k.db")  # another connection, as another process would have
    assert not follower.driven_here and follower.live  # marked running by a living process (this one)
    seen, ended = [], threading.Event()
    follower.follow(lambda event: ended.set() if event is None else seen.append(event.type))
    run.start()
    assert ended.wait(30)
    assert seen[-1] == "run_finished" and seen.count("candidate_evaluated") >= 5
    # While another process drives it (here: marked running by a living pid), only that one can stop it.
    with Store(tmp_path / "k.db") as store:
        store.update_run(run.id, status="running")
    with pytest.raises(RuntimeError, match="driven by process"):
        follower.stop()


def test_missing_baselines_are_named_in_the_legend_and_floors_drawn_on_a_gpu(tmp_path, capsys):
    run = finished_run(tmp_path, iterations=1)
    snap = run.snapshot()
    fig = timeline_figure(snap)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert f"PyTorch eager {REFERENCE_US:,.1f} us" in labels
    assert "torch.compile: not timed (CPU run)" in labels and "physical floor: GPU only" in labels
    assert "correct kernel" in labels and "best so far" in labels and "wrong answer (no time)" in labels

    on_gpu = copy.deepcopy(snap)
    on_gpu.candidates = [Candidate.from_row(dict(c.to_row(), result=dict(c.stored_result, device={
        "name": "NVIDIA H100", "interpreted": False}))) if c.result else c for c in on_gpu.candidates]
    fig = timeline_figure(Snapshot(**{k: getattr(on_gpu, k) for k in
                                      ("run", "candidates", "plans", "findings", "usage", "taken_at")}))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # A linear time axis starts at zero, so it reaches the floor: a line, not an arrow "off scale".
    assert "physical floor 1.0 us" in labels and not any(label.startswith("physical floor:") for label in labels)
    assert "torch.compile: not timed by this run" in labels


def test_points_and_lineage_cover_every_settled_candidate(tmp_path, capsys):
    run = finished_run(tmp_path)
    snap = run.snapshot()
    fig = timeline_figure(snap, by="iteration")
    plotted = sum(len(c.get_offsets()) for c in fig.axes[0].collections)
    assert plotted == len(snap.settled)
    layout = lineage_layout(snap)
    assert set(layout) == {c.id for c in snap.candidates if c.kind != "eager"}
    assert layout[run.seed.id][0] == 0 and layout[run.best.id][0] == 2
    lines = panels.lineage_lines(snap)
    assert lines[0].startswith(f"{run.seed.id} 100.0 us") and len(lines) == len(layout)


def test_a_baseline_far_from_every_candidate_is_an_arrow_and_a_resume_is_marked(tmp_path):
    """On the CPU, PyTorch eager can be 10^4 times the candidates: drawn as a line it would squeeze
    them into one band of a log axis. It is named off scale at the edge instead."""
    run = finished_run(tmp_path, iterations=1)
    snap = run.snapshot()
    snap.candidates = [Candidate.from_row(dict(c.to_row(), geomean_us=c.geomean_us * 1e4))
                       if c.kind == "eager" else c for c in snap.candidates]
    ax = timeline_figure(snap, session_starts=[2.5]).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    eager = f"PyTorch eager {REFERENCE_US * 1e4:,.1f} us"
    assert f"{eager} (off scale)" in labels and "resumed session starts" in labels
    assert any(t.get_text().startswith(f"{eager} ↑") for t in ax.texts)
    assert "resumed" in [t.get_text() for t in ax.texts]
    times = [c.geomean_us for c in snap.correct]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[1] < 2 * max(times)
    assert ax.get_ylabel() == "geomean time over shapes (us)"
    # The best-so-far line ends at the last candidate, not at the axes' edge.
    step = next(line for line in ax.get_lines() if line.get_label() == "best so far")
    assert max(step.get_xdata()) == len(snap.settled)


def test_the_leaderboard_fits_its_panel_and_keeps_full_text_in_tooltips(tmp_path):
    run = finished_run(tmp_path)
    board = panels.leaderboard_html(run.snapshot())
    assert "table-layout: fixed" in board and "width: 100%" in board and "text-overflow: ellipsis" in board
    assert f'title="{panels.esc(run.best.hypothesis)}"' in board
    headers = [h.split(">")[1] for h in board.split("<th ")[1:]]
    assert headers == ["#</th", "id</th", "time</th", "vs seed</th", "vs eager</th", "hypothesis</th"]
    assert "wrong answer" in board and " us" in board  # a failed kernel's verdict sits where its time would


def test_a_measured_experiment_is_shown_measured_even_without_its_finding(tmp_path):
    """A stop between a verdict and its finding: the plan shows the verdict, never "pending"."""
    run = finished_run(tmp_path)
    snap = run.snapshot()
    measured = next(f for f in snap.findings if f.measured_pct is not None)
    snap.findings = [f for f in snap.findings if f is not measured]
    snap.run = dataclasses.replace(snap.run, status="stopped")
    html = panels.hypotheses_html(snap)
    assert f'{measured.measured_pct:+.1f}%</b></span> measured' in html and "pending" not in html
    snap.candidates = [c for c in snap.candidates if c.id != measured.candidate_id]
    snap.__dict__.pop("settled")
    assert "pending (resume the run to evaluate it)" in panels.hypotheses_html(snap)


def test_a_diff_keeps_python_colours_on_changed_lines_and_wraps_at_spaces():
    diff = panels.unified_diff("x = 1\n", "x = compute(2)  # a comment\n", "a", "b")
    html = panels.highlight(diff, "diff")
    added = next(row for row in html.split("<div ") if "compute" in row)
    assert "#e6ffec" in added and added.count("<span style=") >= 3  # name, number and comment coloured
    assert "white-space: pre-wrap" in html and "word-break: normal" in html


def test_an_ended_dashboard_is_replaced_by_a_static_view_a_saved_notebook_can_show(tmp_path, monkeypatch):
    from kscience.jupyter import dashboard

    updates = []
    monkeypatch.setattr(dashboard, "update_display", lambda obj, display_id: updates.append(
        (display_id, obj._repr_mimebundle_())))
    run = launch.new_run("softmax", fake_kernel(100.0), iterations=1, llm="offline", db=tmp_path / "k.db")
    board = Dashboard(run, refresh_s=0.05)
    live = board._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in live and "running" in live["text/html"]
    board.shown()
    run.start()
    assert run.wait(timeout=30) == "finished"
    deadline = time.monotonic() + 10
    while not updates and time.monotonic() < deadline:
        time.sleep(0.05)
    ((display_id, bundle),) = updates
    assert display_id == board.display_id and set(bundle) == {"text/plain", "text/html"}
    assert "finished with 1 of 1 iteration(s) complete" in bundle["text/html"]
    assert "kscience-leaderboard" in bundle["text/html"] and "data:image/png;base64," in bundle["text/html"]


def test_a_run_shown_live_in_a_cell_is_not_repeated_as_that_cells_result(tmp_path, monkeypatch):
    import IPython

    run = finished_run(tmp_path, iterations=1)
    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"execution_count": 7})())
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.append(a[0]))
    run.shown_live_in = 7
    run._ipython_display_()
    assert shown == []
    run.shown_live_in = 6  # shown live by an earlier cell: this one shows the run
    run._ipython_display_()
    assert "finished with 1 of 1" in shown[0]["text/html"]


def test_an_empty_run_draws_without_error(tmp_path):
    run = launch.new_run("softmax", fake_kernel(100.0), iterations=1, llm="offline", db=tmp_path / "k.db")
    snap = run.snapshot()
    import matplotlib.figure

    ax = matplotlib.figure.Figure().add_subplot()
    draw_timeline(ax, snap)
    assert "no candidate evaluated yet" in [t.get_text() for t in ax.texts]
    assert "No experiments designed yet" in panels.hypotheses_html(snap)
    assert "No candidate written yet" in panels.diff_html(snap, None)


def test_the_report_script_writes_four_figures_with_their_command(tmp_path, capsys):
    run = finished_run(tmp_path)
    out = subprocess.run([sys.executable, "-m", "kscience.jupyter.report", "--db", str(tmp_path / "k.db"),
                          "--figures-dir", str(tmp_path / "figs")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    paths = out.stdout.split()
    assert [p.rsplit("/", 1)[1] for p in paths] == [f"softmax-{s}.png" for s in ("timing", "shapes", "lineage",
                                                                                  "uplift")]
    from PIL import Image

    for path in paths:
        image = Image.open(path)
        assert image.size[0] > 500 and "--figures-dir" in image.info["Source"]
        assert run.id in image.info["Description"]
    assert write_figures(tmp_path / "k.db", tmp_path / "again", run.id)[0].name == "softmax-timing.png"
    missing = subprocess.run([sys.executable, "-m", "kscience.jupyter.report", "--db", str(tmp_path / "none.db"),
                              "--figures-dir", str(tmp_path / "figs")], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stderr.strip().startswith("kscience: error: no database at")


def git(repo, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_report_replaces_no_file_git_tracks_unless_told_to(tmp_path):
    """Committed figures (figures/ of the repository) stay as they are: the report refuses, in one
    line, before drawing anything; `overwrite` (--overwrite) replaces them. A figure git does not
    track is simply redrawn."""
    run = finished_run(tmp_path)
    repo = tmp_path / "repo"
    (repo / "figures").mkdir(parents=True)
    git(repo, "init", "-q")
    committed = repo / "figures" / "softmax-timing.png"
    committed.write_bytes(b"the committed H100 figure")
    (repo / "figures" / "softmax-shapes.png").write_bytes(b"an untracked figure")
    git(repo, "add", "figures/softmax-timing.png")
    git(repo, "commit", "-q", "-m", "figures")

    with pytest.raises(ReportError, match=r"1 of the figures would replace files git tracks \(.*softmax-timing.png\)"):
        write_figures(tmp_path / "k.db", repo / "figures", run.id)
    assert committed.read_bytes() == b"the committed H100 figure"
    assert (repo / "figures" / "softmax-shapes.png").read_bytes() == b"an untracked figure"  # nothing drawn
    assert git(repo, "status", "--porcelain") == "?? figures/softmax-shapes.png\n"
    refused = subprocess.run([sys.executable, "-m", "kscience.jupyter.report", "--db", str(tmp_path / "k.db"),
                              "--figures-dir", str(repo / "figures")], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--overwrite" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert committed.read_bytes() == b"the committed H100 figure"

    untracked_only = repo / "elsewhere"
    untracked_only.mkdir()
    (untracked_only / "softmax-timing.png").write_bytes(b"an earlier draw")
    assert write_figures(tmp_path / "k.db", untracked_only, run.id)[0].read_bytes().startswith(PNG_MAGIC)

    replaced = subprocess.run([sys.executable, "-m", "kscience.jupyter.report", "--db", str(tmp_path / "k.db"),
                               "--figures-dir", str(repo / "figures"), "--overwrite"], capture_output=True, text=True,
                              timeout=120)
    assert replaced.returncode == 0, replaced.stderr
    assert committed.read_bytes().startswith(PNG_MAGIC)
    assert " M figures/softmax-timing.png" in git(repo, "status", "--porcelain")
