"""Runs driven by a model through the real client libraries and loopback servers: a KernelBench file
solved by a scripted model, failing fast before any timing, and honouring Retry-After."""

import asyncio
import json
import time
from pathlib import Path

import pytest
from llm_servers import FakeGemini, FakeOpenAI, Reply, Status

from kscience.run.config import ConfigError, RunConfig
from kscience.run.driver import Run
from kscience.scientist.llm.factory import make_llm
from kscience.record.store import Store

DATA = Path(__file__).parent / "data"
LEVEL2 = DATA / "kernelbench_gemm_multiply_leakyrelu.py"

MODEL_NEW = f"```python\n{(DATA / 'kernelbench_gemm_multiply_leakyrelu_new.py').read_text()}```"
PLAN = {"title": "Fuse the multiply and LeakyReLU into one Triton kernel", "rationale": "one pass over the output",
        "changes": ["a Triton kernel for x * multiplier then LeakyReLU after the Linear"],
        "predicted_min_pct": 0, "predicted_max_pct": 30, "innovation": 4}


def test_a_kernelbench_run_through_a_scripted_model_reaches_ok(tmp_path):
    script = [Reply("ready"), Reply(json.dumps({"avenues": ["fuse"], "plans": [PLAN]})), Reply(MODEL_NEW),
              Reply("Fusing the epilogue is correct; its speed can only be judged on a GPU.")]
    with FakeOpenAI(script) as server:
        store = Store(tmp_path / "k.db")
        run = Run.create(RunConfig(problem=str(LEVEL2), llm="openai:scripted", base_url=server.base_url,
                                   iterations=1, repairs=0, overrides={"multiplier": "3.5"}), store=store)
        assert run.start(background=False).status == "finished", run.error
        received = [r.body["messages"][-1]["content"] for r in server.received]
    assert len(received) == 4 and "Reply with the single word" in received[0]  # the preflight came first
    designer, writer, finding = received[1:]
    assert "class Model(nn.Module):" in designer and "multiplier = 3.5  # set with --set" in designer
    assert "# First task: write the kernels" in writer and "def get_init_inputs():" in writer
    assert "Shapes covered: 2 of 2 shape checks passed under the CPU interpreter (1 correctness, 1 benchmark: batch_size=8,in_features=32,out_features=16)" in finding
    child = next(c for c in store.candidates(run.id) if c.kind == "child")
    assert child.status == "ok", child.message
    assert "@triton.jit" in child.source
    roles = [c["role"] for c in store.llm_calls(run.id)]
    assert roles == ["preflight", "designer", "writer", "finding"]  # no selector call: nothing to choose


def test_a_dead_endpoint_fails_the_run_before_anything_is_timed(tmp_path):
    with FakeOpenAI([]) as server:
        dead = server.base_url  # nothing listens there once the server stops
    store = Store(tmp_path / "k.db")
    run = Run.create(RunConfig(problem="softmax", llm="openai:gone", base_url=dead, iterations=1), store=store)
    assert run.start(background=False).status == "failed"
    assert "cannot reach" in run.error and "nothing was timed" in run.error and "\n" not in run.error
    assert store.candidates(run.id) == []


def test_the_offline_scientist_refuses_a_kernelbench_file_before_anything_is_stored(tmp_path):
    store = Store(tmp_path / "k.db")
    with pytest.raises(ConfigError) as refused:
        Run.create(RunConfig(problem=str(LEVEL2), llm="offline", iterations=1), store=store)
    said = str(refused.value)
    assert "cannot write kernels from scratch" in said and "\n" not in said and "resume" not in said
    assert "BLOCK_SIZE" in said and "--llm scripted" in said  # what is missing, and what runs without a key
    assert store.list_runs() == []


@pytest.mark.parametrize("server_class, spec", [(FakeGemini, "gemini:gemini-2.5-pro"), (FakeOpenAI, "openai:m")])
@pytest.mark.parametrize("code", [429, 503])
def test_both_backends_wait_as_long_as_retry_after_asks(server_class, spec, code, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    with server_class([Status(code, retry_after=1.0), Reply("fine")]) as server:
        llm = make_llm(spec, base_url=server.base_url, max_retries=2)
        text, _ = asyncio.run(llm.complete("hello", role="finding"))
        gap = server.received[1].at - server.received[0].at
    assert text == "fine"
    assert gap >= 0.9, f"retried after {gap:.2f}s, though the server asked for 1s"


def test_gemini_retries_a_dropped_connection_and_says_how_often(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    with FakeGemini([]) as server:
        dead = server.base_url
    llm = make_llm("gemini:gemini-2.5-pro", base_url=dead, max_retries=1)
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        asyncio.run(llm.complete("hello", role="finding"))
    assert "cannot reach" in str(caught.value) and "after 1 retry" in str(caught.value)
    assert time.monotonic() - started < 30


def test_the_offline_scientist_may_take_over_once_a_model_has_written_a_kernel():
    from kscience.problems import load_problem
    from kscience.scientist.llm.base import LLMError
    from kscience.scientist.offline import OfflineLLM

    problem = load_problem(str(LEVEL2))
    with pytest.raises(LLMError, match="cannot write kernels from scratch"):
        asyncio.run(OfflineLLM().preflight(problem, [problem.seed_source]))
    written = MODEL_NEW.split("```python\n")[1].rstrip("`")
    asyncio.run(OfflineLLM().preflight(problem, [problem.seed_source, written]))  # BLOCK is a knob it can tune
