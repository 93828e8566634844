"""What `kscience show`, `runs`, `report` and `retime --show` print of a stored run and campaign, kept byte for byte
in tests/data/golden/: the typed records behind them may change, their JSON and text may not.

KSCIENCE_GOLDEN_WRITE=1 writes the files instead (only when the output is meant to change)."""

import os
from pathlib import Path

import pytest

from golden_store import build
from kscience.cli.main import main

GOLDEN = Path(__file__).parent / "data" / "golden"


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    path = tmp_path_factory.mktemp("golden") / "k.db"
    return path, build(path)


def _commands(ids: dict) -> dict[str, list[str]]:
    run, campaign, best, broken = ids["run"], ids["campaign"], ids["best"], ids["broken"]
    return {"show_run.json": ["show", run, "--json"], "show_run.txt": ["show", run],
            "show_candidate.json": ["show", best, "--json"], "show_candidate.txt": ["show", best],
            "show_broken.json": ["show", broken, "--json"], "show_broken.txt": ["show", broken],
            "runs.json": ["runs", "--json"], "report.json": ["report", campaign, "--json"],
            "report.txt": ["report", campaign], "retime.json": ["retime", run, "--show", "--json"],
            "retime.txt": ["retime", run, "--show"]}


@pytest.mark.parametrize("name", list(_commands({"run": "", "campaign": "", "best": "", "broken": ""})))
def test_output_is_unchanged(stored, name, capsys):
    path, ids = stored
    argv = _commands(ids)[name] + ["--db", str(path)]
    assert main(argv) == 0
    out = capsys.readouterr().out.replace(str(path), "DB")
    expected = GOLDEN / name
    if os.environ.get("KSCIENCE_GOLDEN_WRITE"):
        expected.write_text(out)
    assert out == expected.read_text(), f"`kscience {' '.join(argv)}` changed its output"
