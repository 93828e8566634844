"""A GPU MODE task folder written by a test: its reference.py and a task.yml with one shape (n=4)."""

from pathlib import Path


def task_folder(folder: Path, reference: str, yml: str = "") -> Path:
    folder.mkdir()
    (folder / "reference.py").write_text(reference)
    (folder / "task.yml").write_text("tests: [{n: 4}]\nbenchmarks: [{n: 4}]\n" + yml)
    return folder
