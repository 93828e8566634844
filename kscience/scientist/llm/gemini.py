"""Gemini through the google-genai SDK (Gemini Developer API, or Vertex AI via the SDK's own
environment variables), with JSON-schema constrained answers when the caller gives a schema.

Retries are done here, not by the SDK: its HttpRetryOptions back off without reading how long the
server asked the client to wait. On 408, 429 and 5xx answers, and on dropped connections, this
backend sleeps as long as the server asked (the Retry-After header, seconds or an HTTP date, or
Gemini's google.rpc.RetryInfo.retryDelay in the body), else backs off exponentially.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import time
from typing import Any

from kscience.scientist.llm.call import LLMError, full_prompt, one_line
from kscience.scientist.llm.remote import LLM_RETRIES, LLM_TIMEOUT_S, Answer, RemoteLLM, is_timeout, retries_phrase

DEFAULT_GEMINI_MODEL = "gemini-2.5-pro"
KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
VERTEX_FLAGS = ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE")

RETRIED_STATUSES = (408, 429, 500, 502, 503, 504)
# A server asking for a longer pause is reporting a spent quota (per day, say), not a burst.
_LONGEST_SERVER_DELAY_S = 120.0
_LONGEST_BACKOFF_S = 60.0


def gemini_credentials() -> str | None:
    """Which environment settings give Gemini credentials (for messages), or None."""
    for variable in KEY_VARIABLES:
        if os.environ.get(variable):
            return variable
    for flag in VERTEX_FLAGS:
        if os.environ.get(flag, "").lower() in ("true", "1") and os.environ.get("GOOGLE_CLOUD_PROJECT"):
            return f"{flag} + GOOGLE_CLOUD_PROJECT"
    return None


def server_delay_s(exc: Any) -> float | None:
    """Seconds an error answer asks the client to wait: the Retry-After header (seconds or an
    HTTP date) or Gemini's RetryInfo.retryDelay ("37s", "1.5s") in the error body."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    header = headers.get("retry-after") if headers is not None else None
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            when = email.utils.parsedate_tz(header)
            if when is not None:
                return max(0.0, email.utils.mktime_tz(when) - time.time())
    body = exc.details if isinstance(getattr(exc, "details", None), dict) else {}
    error = body.get("error", body)
    for detail in error.get("details", []) if isinstance(error, dict) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            try:
                return max(0.0, float(str(detail.get("retryDelay", "")).rstrip("s")))
            except ValueError:
                return None
    return None


class GeminiLLM(RemoteLLM):
    """`gemini:MODEL`: keys from GEMINI_API_KEY / GOOGLE_API_KEY, or Vertex AI through
    GOOGLE_GENAI_USE_VERTEXAI and GOOGLE_CLOUD_PROJECT; GOOGLE_GEMINI_BASE_URL or `base_url`
    redirects the requests (a proxy, or a local test server)."""

    provider = "gemini"

    def __init__(self, model: str = DEFAULT_GEMINI_MODEL, *, base_url: str | None = None,
                 timeout_s: float = LLM_TIMEOUT_S, max_retries: int = LLM_RETRIES):
        try:
            from google import genai
            from google.genai import errors, types
        except ImportError:
            raise LLMError(f"gemini:{model} needs google-genai: pip install kscience[gemini]") from None
        super().__init__(model, timeout_s=timeout_s, max_retries=max_retries,
                         secrets=tuple(os.environ.get(v, "") for v in KEY_VARIABLES))
        self._genai, self._errors, self._types = genai, errors, types
        self.base_url = base_url or os.environ.get("GOOGLE_GEMINI_BASE_URL") or None
        if gemini_credentials() is None:
            raise LLMError(f"{self.name}: no credentials: set GEMINI_API_KEY or GOOGLE_API_KEY "
                           "(or GOOGLE_GENAI_USE_VERTEXAI=true with GOOGLE_CLOUD_PROJECT)")
        try:  # build a client now so a bad configuration fails here, not at the first call
            self._make_client()
        except Exception as exc:
            raise LLMError(self._redact(f"{self.name}: cannot set up the client: {one_line(exc)}")) from None

    def _make_client(self) -> Any:
        retry = self._types.HttpRetryOptions(attempts=1)  # no SDK retries: _send retries, honouring the server
        options = self._types.HttpOptions(base_url=self.base_url, timeout=max(1, round(self.timeout_s * 1000)),
                                          retry_options=retry)
        # The SDK reads the key and the Vertex settings from the environment itself.
        return self._genai.Client(http_options=options).aio

    async def _send(self, client: Any, prompt: str, *, role: str, system: str | None,
                    schema: dict | None) -> Answer:
        config = self._types.GenerateContentConfig(
            system_instruction=system or None,
            response_mime_type="application/json" if schema is not None else None,
            response_json_schema=schema,
        )
        for retry in range(self.max_retries + 1):
            try:
                response = await client.models.generate_content(model=self.model, contents=prompt, config=config)
                break
            except self._errors.APIError as exc:
                if exc.code not in RETRIED_STATUSES:
                    raise
                delay = server_delay_s(exc)
                what = "rate limited (HTTP 429)" if exc.code == 429 else f"server error {exc.code}"
                reason = one_line(exc.message or exc.status or "", 160)
                if retry == self.max_retries:
                    raise LLMError(f"{self.name}: {what}{retries_phrase(retry)}: {reason}") from None
                if delay is not None and delay > _LONGEST_SERVER_DELAY_S:
                    raise LLMError(f"{self.name}: {what}, server asks to wait {delay:.0f}s: {reason}") from None
            except Exception as exc:
                if not _dropped(exc):
                    raise
                if retry == self.max_retries:
                    raise _Retried(exc, retry) from exc
                delay = None
            await asyncio.sleep(delay if delay is not None else min(_LONGEST_BACKOFF_S, 2.0**retry))
        return self._answer(response, full_prompt(prompt, system))

    @staticmethod
    def _answer(response: Any, sent: str) -> Answer:
        candidates = response.candidates or []
        content = candidates[0].content if candidates else None
        # Thought summaries are not part of the answer.
        text = "".join(p.text for p in (content.parts or []) if p.text and not p.thought) if content else ""
        if candidates:
            finish = str(getattr(candidates[0].finish_reason, "value", candidates[0].finish_reason) or "")
        else:
            feedback = response.prompt_feedback
            block = getattr(feedback.block_reason, "value", feedback.block_reason) if feedback else None
            finish = f"prompt blocked: {block}" if block else "no candidates"
        usage = response.usage_metadata
        input_tokens = (usage.prompt_token_count or 0) if usage else 0
        # Thinking tokens are billed as output.
        output_tokens = ((usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)) if usage else 0
        return Answer(text=text, input_tokens=input_tokens, output_tokens=output_tokens, prompt=sent, finish=finish)

    def _explain(self, exc: Exception) -> str:
        retries = 0
        if isinstance(exc, _Retried):
            exc, retries = exc.cause, exc.retries
        if isinstance(exc, self._errors.APIError):
            reason = one_line(exc.message or exc.status or "", 160)
            kind = "server error" if exc.code >= 500 else "HTTP"
            return f"{kind} {exc.code}: {reason}"
        if isinstance(exc, (self._errors.UnknownApiResponseError, json.JSONDecodeError)):
            return f"unreadable answer from {self.base_url or 'the Gemini API'}: {one_line(exc, 160)}"
        if isinstance(exc, OSError) or "Connect" in type(exc).__name__:
            # aiohttp's own message drags in an SSL context repr; the OS error says it plainly.
            cause = getattr(exc, "os_error", None) or exc
            return (f"cannot reach {self.base_url or 'the Gemini API'}{retries_phrase(retries)}: "
                    f"{type(exc).__name__}: {one_line(cause, 160)}")
        return f"request failed: {type(exc).__name__}: {one_line(exc, 160)}"


class _Retried(Exception):
    """A failure that ended the retries, with how many were made before it."""

    def __init__(self, cause: Exception, retries: int):
        super().__init__(str(cause))
        self.cause, self.retries = cause, retries


def _dropped(exc: Exception) -> bool:
    """A connection refused, reset or dropped: worth another try. Timeouts are not retried: each try
    already waited the whole per-attempt limit."""
    if is_timeout(exc):
        return False
    name = type(exc).__name__
    return isinstance(exc, (ConnectionError, OSError)) or "Connect" in name or "RemoteProtocol" in name
