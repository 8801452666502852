"""The `openai` backend: any OpenAI-compatible chat-completions endpoint (OpenAI, DeepSeek, Qwen's
DashScope, Gemini's compatibility endpoint, vLLM, Ollama, ...).

The API key is read from the environment variable the configuration names, when the backend is built,
and goes nowhere else: not into the configuration, the run directory, the logs, nor an error message.
A request that fails with 429, 408/409, a 5xx, a time-out or a connection error is retried with
exponential backoff (or the server's Retry-After); a 401, 403 or 404 (the key rejected, the model or the
endpoint unknown: no request of the run can succeed) raises BackendUnusable, which stops the run; other
failures, and the last retry, raise BackendError with the reason.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, ClassVar

import attrs
import structlog

from hiera_core import AgentAnswer, AgentRequest, hookimpl
from hiera_core.protocols import BackendError, BackendUnusable

log = structlog.get_logger(__name__)

RETRIED_STATUS = frozenset({408, 409, 429})
"""HTTP statuses retried besides every 5xx."""
UNUSABLE_STATUS = frozenset({401, 403, 404})
"""HTTP statuses that no request of the run can get past: the key, the model or the endpoint is wrong."""


@attrs.frozen(kw_only=True)
class ModelPrice:
    """What one model costs, in US dollars per million tokens."""

    input_usd_per_mtok: float
    output_usd_per_mtok: float


@attrs.frozen(kw_only=True)
class OpenAIConfig:
    """`[backend.openai]`: where the endpoint is, which model, and how to call it."""

    base_url: str = "https://api.openai.com/v1"
    model: str = ""
    """The model name as the endpoint knows it (`deepseek-chat`, `qwen-plus`, ...). Required."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the key; empty for endpoints that need none (a local server)."""
    temperature: float = 0.3
    """The paper's setting for every method."""
    max_tokens: int = 8192
    """Output-token limit per answer; 0 sends none (the endpoint's default)."""
    timeout_s: float = 300.0
    """One HTTP request is abandoned (and retried) after this long."""
    max_retries: int = 4
    backoff_s: float = 1.0
    """First retry delay; it doubles per retry up to `backoff_max_s`, unless the server sends Retry-After."""
    backoff_max_s: float = 60.0
    concurrency: int = 6
    """Requests in flight at once: a round's OA requests go in parallel up to this many."""
    candidates_per_request: int = 1
    """Candidate sources asked for per OA request; 1 sends K requests of one source each."""
    extra_body: dict[str, Any] = attrs.field(factory=dict)
    """Extra JSON fields sent with every request (e.g. `{enable_thinking = false}` for Qwen3)."""
    prices: dict[str, ModelPrice] = attrs.field(factory=dict)
    """Price per model name; a model without one is reported as tokens only."""

    def __attrs_post_init__(self) -> None:
        if self.concurrency < 1 or self.candidates_per_request < 1 or self.max_retries < 0:
            raise ValueError("concurrency and candidates_per_request must be >= 1, max_retries >= 0")


class OpenAIBackend:
    name: ClassVar[str] = "openai"
    config_class: ClassVar[type] = OpenAIConfig

    def __init__(self, config: OpenAIConfig, context: Any) -> None:
        import openai

        # The client's debug logs repeat every prompt and connection step; the run's answer cache and
        # its AgentCalled events already hold what matters, and retries are logged here.
        for name in ("openai", "httpx2", "httpcore2", "httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
        if not config.model:
            raise BackendError("the openai backend needs a model: set [backend.openai] model, or --model")
        key = "unused"
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "")
            if not key:
                raise BackendError(
                    f"the environment variable {config.api_key_env} (api_key_env of [backend.openai]) is not set;"
                    ' set api_key_env = "" for an endpoint that needs no key'
                )
        self.config = config
        self.parallel_requests = config.concurrency
        self.candidates_per_request = config.candidates_per_request
        self._openai = openai
        self._secret = key
        self._client = openai.OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout_s, max_retries=0)

    def answer(self, request: AgentRequest) -> AgentAnswer:
        openai, config = self._openai, self.config
        options: dict[str, Any] = {"temperature": config.temperature, "extra_body": config.extra_body or None}
        if config.max_tokens:
            options["max_tokens"] = config.max_tokens
        for retry in range(config.max_retries + 1):
            try:
                response = self._client.chat.completions.create(
                    model=config.model, messages=[{"role": "user", "content": request.prompt}], **options
                )
                break
            except openai.APIStatusError as exc:
                message = exc.body.get("message") if isinstance(exc.body, dict) else None
                reason = f"HTTP {exc.status_code}: {' '.join(self._scrub(str(message or exc.message))[:300].split())}"
                if exc.status_code in UNUSABLE_STATUS:
                    raise BackendUnusable(f"{reason} from {config.base_url} (model {config.model})") from None
                retried = exc.status_code in RETRIED_STATUS or exc.status_code >= 500
                delay = _retry_after(exc.response.headers.get("retry-after"))
            except openai.APITimeoutError:
                reason, retried, delay = f"no answer within {config.timeout_s:g} s", True, None
            except openai.APIConnectionError as exc:
                reason, retried, delay = f"connection failed: {self._scrub(str(exc.__cause__ or exc))[:300]}", True, None
            if not retried or retry == config.max_retries:
                raise BackendError(reason if not retried else f"{reason} (after {retry + 1} tries)")
            delay = min(config.backoff_max_s, config.backoff_s * 2**retry if delay is None else delay)
            log.warning("llm_retry", role=request.role, sample=request.sample, reason=reason, delay_s=delay, retry=retry + 1)
            time.sleep(delay)
        if not response.choices:
            raise BackendError("the response holds no choice")
        choice = response.choices[0]
        usage = response.usage
        input_tokens = usage.prompt_tokens if usage else 0
        output_tokens = usage.completion_tokens if usage else 0
        return AgentAnswer(
            text=choice.message.content or "",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=response.model or config.model,
            cost_usd=self._cost(input_tokens, output_tokens),
            truncated=choice.finish_reason == "length",
        )

    def _cost(self, input_tokens: int, output_tokens: int) -> float | None:
        price = self.config.prices.get(self.config.model)
        if price is None:
            return None
        return (input_tokens * price.input_usd_per_mtok + output_tokens * price.output_usd_per_mtok) / 1e6

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if len(self._secret) >= 8 else text


def _retry_after(header: str | None) -> float | None:
    """The server's Retry-After in seconds, when it sent one as a number."""
    try:
        return max(0.0, float(header)) if header is not None else None
    except ValueError:
        return None


@hookimpl
def hiera_register_backends():
    return [OpenAIBackend]
