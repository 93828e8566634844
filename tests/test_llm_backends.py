"""The Gemini and OpenAI backends, driven through their real SDKs against loopback servers:
answers, structured output, retries, timeouts, key hygiene, budgets and backend selection."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from llm_servers import FakeGemini, FakeOpenAI, Garbage, LoopbackServer, Received, Reply, Slow, Status

from kscience.scientist.llm import Budget, BudgetExceeded, LLMError
from kscience.record.llm_call import LLMCall
from kscience.scientist.llm.factory import default_llm_spec, make_llm
from kscience.scientist.llm.remote import parse_json_answer
from kscience.scientist.llm.pricing import cost_usd

# google-genai subclasses aiohttp.ClientSession, which aiohttp warns about; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

GEMINI_KEY = "gm-test-key-7f3a9c0e5b2d"
OPENAI_KEY = "sk-test-key-4e8b1d6a2c9f"
SCHEMA = {
    "type": "object",
    "properties": {"plan": {"type": "string"}, "confidence": {"type": "number"}},
    "required": ["plan", "confidence"],
}
GOOD_JSON = '{"plan": "tile the K loop by 64", "confidence": 0.7}'
ENV_VARIABLES = (
    "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE",
    "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL",
    "GOOGLE_GENAI_API_VERSION", "OPENAI_API_KEY", "OPENAI_BASE_URL",
)


@dataclass
class Provider:
    """How one provider's requests look on the wire."""

    name: str
    server: type[LoopbackServer]
    model: str
    key_variable: str
    key: str
    key_header: str
    key_header_value: str

    def schema_sent(self, request: Received) -> dict:
        if self.name == "gemini":
            config = request.body["generationConfig"]
            assert config["responseMimeType"] == "application/json"
            return config["responseJsonSchema"]
        assert request.body["response_format"]["type"] == "json_schema"
        return request.body["response_format"]["json_schema"]["schema"]

    def texts_sent(self, request: Received) -> tuple[str, str]:
        """(system, user) as the server received them."""
        if self.name == "gemini":
            return (request.body["systemInstruction"]["parts"][0]["text"],
                    request.body["contents"][0]["parts"][0]["text"])
        messages = {m["role"]: m["content"] for m in request.body["messages"]}
        return messages["system"], messages["user"]


GEMINI = Provider("gemini", FakeGemini, "gemini-2.5-pro", "GEMINI_API_KEY", GEMINI_KEY,
                  "x-goog-api-key", GEMINI_KEY)
OPENAI = Provider("openai", FakeOpenAI, "gpt-4o", "OPENAI_API_KEY", OPENAI_KEY,
                  "authorization", f"Bearer {OPENAI_KEY}")
PROVIDERS = pytest.mark.parametrize("provider", [GEMINI, OPENAI], ids=["gemini", "openai"])


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Start every test from an environment with no provider settings at all."""
    for variable in ENV_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


def backend(provider: Provider, server: LoopbackServer, monkeypatch, **options):
    monkeypatch.setenv(provider.key_variable, provider.key)
    return make_llm(f"{provider.name}:{provider.model}", base_url=server.base_url, **options)


def ask(llm, prompt="Propose the next experiment.", role="designer", system="You optimise GPU kernels.",
        schema=SCHEMA):
    return asyncio.run(llm.complete(prompt, role=role, system=system, schema=schema))


def fails(llm, **kwargs) -> LLMError:
    with pytest.raises(LLMError) as caught:
        ask(llm, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return caught.value


# -- answers --------------------------------------------------------------------------------

@PROVIDERS
def test_good_answer_is_recorded_with_tokens_cost_and_latency(provider, monkeypatch):
    recorded: list[LLMCall] = []
    with provider.server([Reply(GOOD_JSON, input_tokens=1000, output_tokens=200)]) as server:
        llm = backend(provider, server, monkeypatch, recorder=recorded.append)
        text, call = ask(llm)

    assert json.loads(text) == {"plan": "tile the K loop by 64", "confidence": 0.7}
    assert recorded == [call]
    assert call.model == f"{provider.name}:{provider.model}" and call.role == "designer"
    assert (call.input_tokens, call.output_tokens) == (1000, 200)
    list_price = {"gemini": 1000 * 1.25e-6 + 200 * 10e-6, "openai": 1000 * 2.5e-6 + 200 * 10e-6}
    assert call.cost_usd == pytest.approx(list_price[provider.name]) and call.priced
    assert 0 < call.latency_s < 10 and call.error is None and call.response == GOOD_JSON
    assert "You optimise GPU kernels." in call.prompt and "Propose the next experiment." in call.prompt
    assert provider.key not in json.dumps(call.to_dict())

    (request,) = server.received
    assert provider.schema_sent(request) == SCHEMA
    assert provider.texts_sent(request) == ("You optimise GPU kernels.", "Propose the next experiment.")
    # The key travels in its header and nowhere else: not the URL, not the body, not another header.
    assert request.headers[provider.key_header] == provider.key_header_value
    assert [name for name, value in request.headers.items() if provider.key in value] == [provider.key_header]
    assert provider.key not in request.path + request.query and provider.key.encode() not in request.raw


def test_gemini_thinking_tokens_count_as_output(monkeypatch):
    with FakeGemini([Reply(GOOD_JSON, input_tokens=100, output_tokens=50, thoughts_tokens=400)]) as server:
        _, call = ask(backend(GEMINI, server, monkeypatch))
    assert (call.input_tokens, call.output_tokens) == (100, 450)


@PROVIDERS
def test_plain_text_answer_without_schema(provider, monkeypatch):
    with provider.server([Reply("Tile the K loop; it is memory bound.")]) as server:
        text, call = ask(backend(provider, server, monkeypatch), role="finding", schema=None)
    assert text == "Tile the K loop; it is memory bound." and call.role == "finding"
    body = server.received[0].body
    assert "responseJsonSchema" not in body.get("generationConfig", {}) and "response_format" not in body


@PROVIDERS
@pytest.mark.parametrize("bad", ["Sure! The plan: tile the K loop.", '{"plan": "tile"}', "[1, 2]"],
                         ids=["prose", "missing-key", "array"])
def test_malformed_json_is_an_error_and_still_accounted(provider, bad, monkeypatch):
    recorded: list[LLMCall] = []
    budget = Budget()
    with provider.server([Reply(bad, input_tokens=500, output_tokens=40)]) as server:
        error = fails(backend(provider, server, monkeypatch, budget=budget, recorder=recorded.append))
    assert str(error).startswith(f"{provider.name}:{provider.model} returned malformed JSON for the designer: ")
    assert error.call is not None and error.call.response == bad and error.call.error == str(error)
    assert recorded == [error.call]
    assert budget.used.tokens == 540 and budget.used.calls == 1


@PROVIDERS
def test_garbage_body_is_an_unreadable_answer(provider, monkeypatch):
    with provider.server([Garbage()]) as server:
        error = fails(backend(provider, server, monkeypatch, max_retries=0))
    assert "unreadable answer" in str(error) and str(error).startswith(f"{provider.name}:{provider.model}: ")


def test_json_in_a_markdown_fence_is_unwrapped():
    text, problem = parse_json_answer('```json\n{"plan": "x", "confidence": 1}\n```', SCHEMA)
    assert problem is None and json.loads(text) == {"plan": "x", "confidence": 1}


# -- retries and timeouts ---------------------------------------------------------------------

@pytest.mark.parametrize("provider, rate_limit", [
    (GEMINI, Status(429, "quota exceeded", retry_delay="1s")),  # how Gemini itself says it
    (GEMINI, Status(429, "quota exceeded", retry_after=1)),  # how a proxy in front of it says it
    (OPENAI, Status(429, "rate limit reached", retry_after=1)),
], ids=["gemini-retryinfo", "gemini-retry-after", "openai-retry-after"])
def test_rate_limit_waits_as_asked_then_succeeds(provider, rate_limit, monkeypatch):
    with provider.server([rate_limit, Reply(GOOD_JSON)]) as server:
        text, call = ask(backend(provider, server, monkeypatch))
    first, second = server.received
    assert second.at - first.at >= 0.9
    assert json.loads(text)["plan"] and call.latency_s >= 0.9


@PROVIDERS
def test_server_error_then_success(provider, monkeypatch):
    with provider.server([Status(503, "overloaded"), Reply(GOOD_JSON)]) as server:
        text, _ = ask(backend(provider, server, monkeypatch))
    assert json.loads(text)["confidence"] == 0.7 and len(server.received) == 2


@PROVIDERS
def test_persistent_server_error_gives_up_after_the_retries(provider, monkeypatch):
    recorded: list[LLMCall] = []
    with provider.server([Status(503, "overloaded")] * 2) as server:
        error = fails(backend(provider, server, monkeypatch, max_retries=1, recorder=recorded.append))
    assert str(error) == f"{provider.name}:{provider.model}: server error 503 after 1 retry: overloaded"
    assert len(server.received) == 2 and recorded[0].error == str(error)


@PROVIDERS
def test_rate_limit_past_the_retries_is_an_error(provider, monkeypatch):
    with provider.server([Status(429, "slow down", retry_after=0.2)] * 2) as server:
        error = fails(backend(provider, server, monkeypatch, max_retries=1))
    assert str(error) == f"{provider.name}:{provider.model}: rate limited (HTTP 429) after 1 retry: slow down"


@PROVIDERS
def test_slow_answer_times_out(provider, monkeypatch):
    with provider.server([Slow(5)]) as server:
        started = time.monotonic()
        error = fails(backend(provider, server, monkeypatch, timeout_s=0.5, max_retries=0))
    assert time.monotonic() - started < 4
    assert str(error).startswith(f"{provider.name}:{provider.model}: timed out after ")
    assert "limit 0.5s per attempt" in str(error)


@PROVIDERS
def test_dead_provider_is_a_one_line_error(provider, monkeypatch):
    server = provider.server([]).start()
    server.stop()  # the port is now closed
    error = fails(backend(provider, server, monkeypatch, max_retries=0))
    assert str(error).startswith(f"{provider.name}:{provider.model}: cannot reach ")


def test_openai_falls_back_to_json_mode_when_json_schema_is_rejected(monkeypatch):
    script = [Status(400, "response_format json_schema is not supported"), Reply(GOOD_JSON), Reply(GOOD_JSON)]
    with FakeOpenAI(script) as server:
        llm = backend(OPENAI, server, monkeypatch)
        first, _ = ask(llm)
        second, call = ask(llm)
    assert json.loads(first) == json.loads(second)
    formats = [request.body["response_format"]["type"] for request in server.received]
    assert formats == ["json_schema", "json_object", "json_object"]  # the rejection is remembered
    system, _ = OPENAI.texts_sent(server.received[1])
    assert system.startswith("You optimise GPU kernels.") and '"confidence"' in system and "JSON" in system
    assert '"required"' in call.prompt


# -- keys -------------------------------------------------------------------------------------

@PROVIDERS
def test_key_never_reaches_records_or_messages(provider, monkeypatch):
    echo = Status(401 if provider is OPENAI else 400, f"API key {provider.key} not valid. Please pass a valid key.")
    recorded: list[LLMCall] = []
    with provider.server([echo]) as server:
        error = fails(backend(provider, server, monkeypatch, recorder=recorded.append))
    assert "not valid" in str(error) and provider.key not in str(error) and provider.key not in repr(error)
    assert provider.key not in json.dumps(recorded[0].to_dict())


def test_local_openai_server_needs_no_key_and_unknown_models_are_unpriced(monkeypatch):
    with FakeOpenAI([Reply("hello")]) as server:
        llm = make_llm("openai:my-local-model", base_url=server.base_url)
        _, call = ask(llm, schema=None)
    assert server.received[0].headers["authorization"] == "Bearer not-needed"
    assert call.cost_usd == 0.0 and call.priced is False and call.model == "openai:my-local-model"


def test_openai_base_url_from_the_environment(monkeypatch):
    with FakeOpenAI([Reply("hello")]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        text, _ = ask(make_llm("openai:my-local-model"), schema=None)
    assert text == "hello"


def test_gemini_base_url_from_the_environment(monkeypatch):
    with FakeGemini([Reply("hello")]) as server:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.base_url)
        monkeypatch.setenv("GOOGLE_API_KEY", GEMINI_KEY)
        text, _ = ask(make_llm("gemini:gemini-2.5-flash"), schema=None)
    assert text == "hello" and server.received[0].headers["x-goog-api-key"] == GEMINI_KEY


# -- budget -----------------------------------------------------------------------------------

def test_token_budget_stops_the_next_call_before_it_is_sent(monkeypatch):
    budget = Budget(max_tokens=1000)
    with FakeGemini([Reply(GOOD_JSON, input_tokens=900, output_tokens=300), Reply(GOOD_JSON)]) as server:
        llm = backend(GEMINI, server, monkeypatch, budget=budget)
        ask(llm)
        with pytest.raises(BudgetExceeded, match=r"^budget spent: 1200 of 1000 tokens after 1 calls$"):
            ask(llm)
    assert len(server.received) == 1


def test_cost_budget_stops_the_next_call_before_it_is_sent(monkeypatch):
    budget = Budget(max_cost_usd=0.005)
    with FakeOpenAI([Reply(GOOD_JSON, input_tokens=1200, output_tokens=300), Reply(GOOD_JSON)]) as server:
        llm = backend(OPENAI, server, monkeypatch, budget=budget)
        ask(llm)
        with pytest.raises(BudgetExceeded, match=r"^budget spent: \$0\.0060 of \$0\.0050"):
            ask(llm)
    assert len(server.received) == 1
    assert budget.used.cost_usd == pytest.approx(1200 * 2.5e-6 + 300 * 10e-6)


def test_time_budget():
    Budget(time_limit_s=60).check()
    with pytest.raises(BudgetExceeded, match="time limit reached"):
        Budget(time_limit_s=0).check()


def test_recorder_sees_each_call_after_the_budget_counted_it(monkeypatch):
    budget = Budget()
    seen_calls: list[int] = []
    with FakeGemini([Reply(GOOD_JSON), Status(400, "bad request")]) as server:
        llm = backend(GEMINI, server, monkeypatch, budget=budget,
                      recorder=lambda call: seen_calls.append(budget.used.calls))
        ask(llm)
        fails(llm)
    assert seen_calls == [1, 2]


def test_budget_is_thread_safe():
    budget = Budget()
    call = LLMCall("writer", "gemini:gemini-2.5-pro", "p", "r", 3, 4, 0.1, 0.5)

    def add_many():
        for _ in range(2000):
            budget.add(call)

    threads = [threading.Thread(target=add_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert budget.used.calls == 16000 and budget.used.tokens == 16000 * 7
    assert budget.used.cost_usd == pytest.approx(8000.0)


# -- prices -----------------------------------------------------------------------------------

def test_prices_follow_snapshots_and_long_prompts_and_do_not_guess():
    assert cost_usd("openai:gpt-4o-2024-08-06", 1_000_000, 0) == (2.5, True)
    assert cost_usd("gemini:gemini-2.5-pro", 300_000, 1_000_000) == pytest.approx((0.75 + 15.0, True))
    assert cost_usd("openai:o3-mini", 1000, 1000) == (0.0, False)  # not "o3" with a suffix


# -- choosing a backend -------------------------------------------------------------------------

@pytest.mark.parametrize("env, spec", [
    ({}, "offline"),
    ({"GEMINI_API_KEY": GEMINI_KEY}, "gemini:gemini-2.5-pro"),
    ({"GOOGLE_API_KEY": GEMINI_KEY}, "gemini:gemini-2.5-pro"),
    ({"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_CLOUD_PROJECT": "my-project"}, "gemini:gemini-2.5-pro"),
    ({"GOOGLE_GENAI_USE_VERTEXAI": "true"}, "offline"),
    ({"OPENAI_API_KEY": OPENAI_KEY}, "openai:gpt-4.1"),
    ({"OPENAI_API_KEY": OPENAI_KEY, "GEMINI_API_KEY": GEMINI_KEY}, "gemini:gemini-2.5-pro"),
])
def test_default_spec_follows_the_environment(env, spec, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    chosen, reason = default_llm_spec()
    assert chosen == spec and reason and "\n" not in reason
    assert GEMINI_KEY not in reason and OPENAI_KEY not in reason


@pytest.mark.parametrize("variable, key, name", [
    ("GEMINI_API_KEY", GEMINI_KEY, "gemini:gemini-2.5-pro"),
    ("OPENAI_API_KEY", OPENAI_KEY, "openai:gpt-4.1"),
])
def test_make_llm_without_a_spec_builds_the_default(variable, key, name, monkeypatch):
    monkeypatch.setenv(variable, key)
    assert make_llm(None).name == name


def test_make_llm_offline_without_keys():
    pytest.importorskip("kscience.scientist.offline")
    assert make_llm(None).name == "offline"


@pytest.mark.parametrize("spec, message", [
    ("claude:opus", "unknown LLM 'claude:opus'"),
    ("openai:gpt-4o", "openai:gpt-4o: OPENAI_API_KEY is not set"),
    ("gemini:gemini-2.5-pro", "gemini:gemini-2.5-pro: no credentials: set GEMINI_API_KEY"),
])
def test_bad_spec_or_missing_key_is_a_one_line_error(spec, message):
    with pytest.raises(LLMError) as caught:
        make_llm(spec)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


@pytest.mark.parametrize("module, spec, extra", [
    ("google.genai", "gemini:gemini-2.5-pro", "kscience[gemini]"),
    ("openai", "openai:gpt-4o", "kscience[openai]"),
])
def test_missing_sdk_names_the_extra_to_install(module, spec, extra, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setitem(sys.modules, module, None)  # makes the import fail as if not installed
    with pytest.raises(LLMError, match=rf"^{re.escape(spec)} needs .*: pip install {re.escape(extra)}$"):
        make_llm(spec)


def test_importing_the_backends_loads_no_sdk():
    code = ("import sys, kscience.scientist.llm; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'aiohttp', 'httpx', 'httpx2')"
            " or m.startswith('google.genai')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent)
    assert out.stdout.strip() == "[]"
