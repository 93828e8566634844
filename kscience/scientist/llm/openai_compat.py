"""OpenAI, or any server speaking its chat-completions protocol (vLLM, Ollama, LiteLLM, ...),
through the openai SDK, with JSON-schema constrained answers when the caller gives a schema.

The SDK does the retrying: with `max_retries` it retries 408, 409, 429 and 5xx answers,
timeouts and dropped connections, and waits as long as Retry-After / retry-after-ms asks
(up to two minutes), else backs off exponentially.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from kscience.scientist.llm.call import LLMError, full_prompt, one_line
from kscience.scientist.llm.remote import LLM_RETRIES, LLM_TIMEOUT_S, Answer, RemoteLLM, retries_phrase

DEFAULT_OPENAI_MODEL = "gpt-4.1"
# Local servers ignore the key, but the SDK refuses to start without one.
PLACEHOLDER_KEY = "not-needed"


def schema_instruction(schema: dict) -> str:
    """Told to servers that only offer plain JSON mode, which requires the word JSON in the prompt."""
    return ("Answer with a single JSON object and nothing else. It must follow this JSON schema:\n"
            + json.dumps(schema, indent=2))


class OpenAILLM(RemoteLLM):
    """`openai:MODEL`: the key from OPENAI_API_KEY; `base_url` or OPENAI_BASE_URL points at
    another OpenAI-compatible server, which then needs no key."""

    provider = "openai"

    def __init__(self, model: str = DEFAULT_OPENAI_MODEL, *, base_url: str | None = None,
                 timeout_s: float = LLM_TIMEOUT_S, max_retries: int = LLM_RETRIES):
        try:
            import openai
        except ImportError:
            raise LLMError(f"openai:{model} needs the openai package: pip install kscience[openai]") from None
        key = os.environ.get("OPENAI_API_KEY", "")
        super().__init__(model, timeout_s=timeout_s, max_retries=max_retries, secrets=(key,))
        self._openai = openai
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self._key = key or (PLACEHOLDER_KEY if self.base_url else "")
        if not self._key:
            raise LLMError(f"{self.name}: OPENAI_API_KEY is not set (a local server needs only a base_url)")
        # Servers that reject response_format json_schema get plain JSON mode from then on.
        self.json_schema_supported = True
        try:  # build a client now so a bad configuration fails here, not at the first call
            self._make_client()
        except Exception as exc:
            raise LLMError(self._redact(f"{self.name}: cannot set up the client: {one_line(exc)}")) from None

    def _make_client(self) -> Any:
        return self._openai.AsyncOpenAI(api_key=self._key, base_url=self.base_url,
                                        max_retries=self.max_retries, timeout=self.timeout_s)

    async def _send(self, client: Any, prompt: str, *, role: str, system: str | None,
                    schema: dict | None) -> Answer:
        if schema is not None and self.json_schema_supported:
            response_format = {"type": "json_schema", "json_schema": {
                "name": re.sub(r"[^A-Za-z0-9_-]", "_", role)[:64] or "answer",
                "schema": schema,
                # Strict mode accepts only schemas whose every property is required and that
                # forbid extra keys; the answer is checked here anyway.
                "strict": False,
            }}
            try:
                return await self._ask(client, prompt, system, response_format)
            except (self._openai.BadRequestError, self._openai.UnprocessableEntityError):
                answer = await self._ask(client, prompt, _with_schema(system, schema), {"type": "json_object"})
                # Only a fallback that worked proves the rejection was about the format.
                self.json_schema_supported = False
                return answer
        if schema is not None:
            return await self._ask(client, prompt, _with_schema(system, schema), {"type": "json_object"})
        return await self._ask(client, prompt, system, None)

    async def _ask(self, client: Any, prompt: str, system: str | None, response_format: dict | None) -> Answer:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        extra = {"response_format": response_format} if response_format else {}
        completion = await client.chat.completions.create(model=self.model, messages=messages, **extra)
        if not hasattr(completion, "choices"):  # the SDK hands back a non-JSON body as plain text
            raise LLMError(f"{self.name}: unreadable answer from {self._where()}: {one_line(completion, 160)}")
        choice = completion.choices[0] if completion.choices else None
        message = choice.message if choice else None
        finish = (choice.finish_reason or "") if choice else "no choices"
        if message is not None and getattr(message, "refusal", None):
            finish = f"{finish}; refusal: {one_line(message.refusal, 120)}"
        usage = completion.usage
        return Answer(
            text=(message.content or "") if message else "",
            input_tokens=(usage.prompt_tokens or 0) if usage else 0,
            # Reasoning tokens are already inside completion_tokens.
            output_tokens=(usage.completion_tokens or 0) if usage else 0,
            prompt=full_prompt(prompt, system),
            finish=finish,
        )

    def _where(self) -> str:
        return self.base_url or "api.openai.com"

    def _explain(self, exc: Exception) -> str:
        errors = self._openai
        retries = _retries_taken(exc)
        where = self._where()
        if isinstance(exc, errors.APIStatusError):
            body = exc.body.get("message") if isinstance(exc.body, dict) else exc.body
            reason = one_line(body or exc.message, 160)
            status = exc.status_code
            if status == 429:
                # Stopping before max_retries means the SDK refused to wait that long (over two
                # minutes, usually a spent daily quota): say what the server asked for.
                asked = exc.response.headers.get("retry-after")
                wait = f", server asks to wait {asked}s" if asked and retries < self.max_retries else ""
                return f"rate limited (HTTP 429){retries_phrase(retries)}{wait}: {reason}"
            if status >= 500:
                return f"server error {status}{retries_phrase(retries)}: {reason}"
            return f"HTTP {status}: {reason}"
        if isinstance(exc, errors.APIConnectionError):
            cause = exc.__cause__ or exc
            return f"cannot reach {where}{retries_phrase(retries)}: {type(cause).__name__}: {one_line(cause, 160)}"
        if isinstance(exc, (errors.APIResponseValidationError, json.JSONDecodeError)):
            return f"unreadable answer from {where}: {one_line(exc, 160)}"
        return f"request failed: {type(exc).__name__}: {one_line(exc, 160)}"


def _with_schema(system: str | None, schema: dict) -> str:
    return f"{system}\n\n{schema_instruction(schema)}" if system else schema_instruction(schema)


def _retries_taken(exc: Exception) -> int:
    """The SDK numbers each attempt in the x-stainless-retry-count header of its request."""
    request = getattr(exc, "request", None)
    try:
        return int(request.headers.get("x-stainless-retry-count", 0))
    except (AttributeError, ValueError):
        return 0
