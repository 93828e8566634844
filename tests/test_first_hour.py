"""What a new user meets in the first hour (issue 41): problems too big for the machine refused before a
worker starts, a candidate to look at by its id, tables that say what their columns count, a finished
run that names its next step, and messages said once, in one wording."""

import pytest

from kscience.cli.main import main

SOFTMAX_FILE = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                "        return torch.softmax(x, dim=1)\n\n\nbatch_size = 4096\ndim = 393216\n\n\n"
                "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\ndef get_init_inputs():\n    return []\n")
SOFTMAX_NEW = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
               "        return torch.softmax(x, dim=1)\n")


def run_main(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_eval_refuses_a_problem_too_big_for_the_machine_and_names_the_sizes_to_set(tmp_path, capsys):
    problem, candidate = tmp_path / "softmax_big.py", tmp_path / "mine.py"
    problem.write_text(SOFTMAX_FILE)
    candidate.write_text(SOFTMAX_NEW)
    code, out, err = run_main(capsys, "eval", str(problem), str(candidate), "--set", "dim=10000000000000")
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("kscience: error: softmax_big does not fit: needs about ")
    assert "of host memory free; make it smaller with --set NAME=VALUE (its sizes: batch_size=4096, " \
           "dim=10000000000000)" in line
