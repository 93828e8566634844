"""What a model sees, end to end: a run driven by a scripted model through the OpenAI-compatible client, on
the CPU interpreter, targeting an H200. One of its two experiments is rejected as a wrong answer (its writer
notes a deviation from the plan), the other is timed. The prompts the run recorded then show:

- for the rejected kernel, its whole verdict (status, failing shape with its sizes, the first bad value
  against the expected one, the threshold) in its finding and in the next designer's prompt, with its
  sibling beside it;
- for the timed kernel, what its call held next to its timed median, and what the median counts;
- in every designer, writer and repair prompt, the build limit and step limit as the run set them, the
  build paths, the precision policy and the state rule; and no AMD note on an H200 run;
- and `kscience show` displays the writer's deviation note.
"""

from __future__ import annotations

import json
import re
import sqlite3

from scripted_kernel_model import ScriptedKernelModel

from kscience.cli.main import main
from kscience.evaluate.result import clock_counts
from kscience.record.store import Store
from kscience.run.config import RunConfig
from kscience.run.driver import Run

DEVIATION = "BLOCK 4096 would not fit the registers, so the kernel keeps the base's block."
WRONG_TAIL = f'''
_right_kernel = custom_kernel


def custom_kernel(data):
    out = _right_kernel(data)
    out[0, 3] = out[0, 3] + 0.5
    return out
```

```deviations
{DEVIATION}
'''


class WritesOneWrongKernel(ScriptedKernelModel):
    """Variant 0's writer breaks the kernel and says it deviated; everything else as the scripted model."""

    def answer(self, body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        if "# Plan: variant 0" in prompt and "# What to do\nCarry out the plan" in prompt:
            base = re.findall(r"```python\n(.*?)```", prompt, re.S)[-1]
            return f"```python\n{base}{WRONG_TAIL}```"
        return super().answer(body)


def prompts(store: Store, run_id: str, role: str) -> list[str]:
    return [c["prompt"] for c in store.llm_calls(run_id) if c["role"] == role]


def test_a_run_shows_the_model_whole_verdicts_call_breakdowns_and_the_rules(tmp_path, capsys):
    db = tmp_path / "k.db"
    with WritesOneWrongKernel(n_plans=2) as server:
        store = Store(db)
        config = RunConfig(problem="softmax", llm="openai:scripted", base_url=server.base_url, iterations=1,
                           repairs=0, lines=1, eval_timeout_s=45, build_limit_s=400, target="h200",
                           profile="none")
        run = Run.create(config, store=store)
        assert run.start(background=False).status == "finished", run.error
        # A second design, once the first one's findings are recorded: it sees what they learnt.
        again = Run.resume(run.id, store=store, iterations=1)
        assert again.start(background=False).status == "finished", again.error
    children = {c.hypothesis: c for c in store.candidates(run.id) if c.kind == "child" and c.iteration == 1}
    wrong, timed = children["variant 0"], children["variant 1"]
    assert wrong.status == "wrong_answer" and timed.status == "ok", (wrong.message, timed.message)
    assert wrong.deviations == DEVIATION and timed.deviations == ""
    assert "first at (0, 3): got" in wrong.message and "> atol + rtol * |expected|" in wrong.message

    # The first design's findings (the second design may reuse its titles on another base).
    findings = {p.split("Plan: ")[1].split("\n")[0]: p for p in prompts(store, run.id, "finding")[:2]}
    about_wrong = findings["variant 0"]
    assert "Status: wrong_answer" in about_wrong
    assert re.search(r"Failing shape: m=\d+,n=\d+: data\[0\] \d+x\d+ bfloat16", about_wrong)
    assert "| " + wrong.message in about_wrong  # whole, quoted as untrusted data
    assert f"The writer's note on what it did otherwise than the plan: {DEVIATION}" in about_wrong
    about_timed = findings["variant 1"]
    assert "- what a call holds (the median of 1 call(s) profiled after the timed calls" in about_timed
    assert re.search(r"timed median [\d,.]+ us; profiled call [\d,.]+ us = [\d,.]+ us before the first kernel", about_timed)
    assert f"What the timed median counts: {clock_counts(True)}." in about_timed

    first, second = prompts(store, run.id, "designer")[:2]  # the second: the resumed run's, on the best kernel
    assert "wrong_answer" not in first
    assert f"variant 0: failed (wrong_answer on {','.join(f'{k}={v}' for k, v in wrong.result.failing_shape.items())}: `" \
        in second and "first at (0, 3): got" in second
    assert re.search(rf'- plan "variant 0": `{wrong.id}` wrong_answer on m=\d+,n=\d+: `', second)
    # Variant 1 is the seed with a comment: under the interpreter's noise it may time faster and be the base.
    beside = re.search(rf'- plan "variant 1": `{timed.id}` ok, geomean', second)
    as_base = f'Current best: `{timed.id}` (the base itself), from "variant 1"' in second
    assert beside or as_base, second[second.find("# Around"):][:1500]

    rules = ["- Building: while a compiler runs in the judge's worker", "up to 400 s of building per step",
             "may wait for the kernel 45 s (--eval-timeout), and never longer than the judge's own limits",
             "`KSCIENCE_BUILD_DIR`", "- Precision: an output is correct when every element is within rtol=0.01",
             "- State across calls: no member of `data` is constant"]
    for role in ("designer", "writer"):
        for prompt in prompts(store, run.id, role):
            assert all(rule in prompt for rule in rules), (role, [r for r in rules if r not in prompt])
            assert "## cdna3.md" not in prompt and "## hopper.md" in prompt, role
    assert ("[knowledge: left out: cdna3.md (about AMD (ROCm) hardware; the target is NVIDIA (CUDA))]"
            in first)

    assert main(["show", wrong.id, "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert f"deviations (the writer's note on what it did otherwise than the plan): {DEVIATION}" in shown
    assert main(["show", wrong.id, "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["candidate"]["deviations"] == DEVIATION


def test_a_schema_6_database_gains_the_deviations_column_and_keeps_its_rows(tmp_path):
    from kscience.record.database import SCHEMA_VERSION

    path = tmp_path / "old.db"
    with Store(path) as store:
        run_id = store.create_run(name="old", problem="softmax", overrides={}, llm="offline", strategy="llm",
                                  config={}, environment={})
        old = store.add_candidate(run_id, kind="seed", source="x", hypothesis="seed", iteration=0)
    db = sqlite3.connect(path)  # as kscience wrote it before writers could note a deviation
    db.execute("ALTER TABLE candidates DROP COLUMN deviations")
    db.execute("PRAGMA user_version=6")
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.candidate(old.id).deviations == ""
        new = store.add_candidate(run_id, kind="child", source="y", hypothesis="h", iteration=1, parent_id=old.id,
                                  deviations=DEVIATION)
        assert store.candidate(new.id).deviations == DEVIATION
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
