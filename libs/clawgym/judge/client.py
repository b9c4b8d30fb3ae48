"""`Judge`: one rubric scoring through an OpenAI-compatible chat endpoint, failures captured.

`judge()` never raises for the judge's own failures: a transport error, a timeout, an HTTP error or
an answer that is not a verdict (whatever it holds) comes back as a `JudgeOutcome` with `score`
None and the `error` said, the prompt and whatever was answered kept, so the caller records it and
decides (the orchestrator: a `judge` infrastructure failure). Transport errors, timeouts, 429 and
5xx are retried `JudgeConfig.retries` times; an answer, parseable or not, is final (the judge
samples at T = 0).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from clawgym.judge.config import JudgeConfig
from clawgym.judge.evidence import Evidence
from clawgym.judge.parse import UnparseableAnswer, parse_answer
from clawgym.judge.prompt import build_messages
from clawgym.tasks.rubric import Rubric

_RETRIED_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class JudgeOutcome:
    model: str
    base_url: str
    messages: list[dict[str, Any]]
    raw_answer: str = ""
    rule_scores: dict[str, float] = field(default_factory=dict)
    score: float | None = None  # the rubric's score; None = the judge failed (`error`)
    error: str = ""
    latency_s: float = 0.0
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.score is not None


class _Retry(Exception):
    """A transient failure: tried again while retries are left."""


class _Final(Exception):
    """A failure retrying cannot fix (a 4xx, a reply that is not a chat completion)."""


class Judge:
    """Scores rubrics with the judge `cfg` names (one shared HTTP client; `close()` it)."""

    def __init__(self, cfg: JudgeConfig, client: httpx.AsyncClient | None = None) -> None:
        if not cfg.enabled:
            raise ValueError("JudgeConfig.base_url is empty: no judge configured")
        self.cfg = cfg
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        self._client = client

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.cfg.timeout_s, trust_env=False)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def judge(self, instruction: str, rubric: Rubric, evidence: Evidence) -> JudgeOutcome:
        messages = build_messages(instruction, rubric, evidence)
        outcome = dict(model=self.cfg.model, base_url=self.cfg.base_url, messages=messages)
        started = time.monotonic()
        error, attempts = "", 0
        for attempt in range(self.cfg.retries + 1):
            attempts = attempt + 1
            if attempt:
                await asyncio.sleep(self.cfg.retry_backoff_s * 2 ** (attempt - 1))
            try:
                answer = await self._ask(messages)
            except _Retry as e:
                error = str(e)
                continue
            except _Final as e:
                error = str(e)
                break
            latency = time.monotonic() - started
            try:
                scores = parse_answer(answer, rubric)
                score = rubric.score(scores)
            except Exception as e:  # whatever the answer holds, it ends as a recorded judgment
                why = str(e) if isinstance(e, UnparseableAnswer) else f"{type(e).__name__}: {e}"
                return JudgeOutcome(**outcome, raw_answer=answer, error=f"unparseable answer: {why}",
                                    latency_s=latency, attempts=attempts)  # fmt: skip
            return JudgeOutcome(**outcome, raw_answer=answer, rule_scores=scores, score=score,
                                latency_s=latency, attempts=attempts)  # fmt: skip
        return JudgeOutcome(**outcome, error=error, latency_s=time.monotonic() - started, attempts=attempts)

    async def _ask(self, messages: list[dict[str, Any]]) -> str:
        """The answer's text; _Retry for a transient failure, _Final for one retrying cannot fix."""
        key = self.cfg.api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {
            "model": self.cfg.model,
            "messages": messages,
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
            "stream": False,
        }
        try:
            reply = await self._http().post(self.url, json=body, headers=headers, timeout=self.cfg.timeout_s)
        except httpx.TimeoutException as e:
            raise _Retry(f"the judge timed out after {self.cfg.timeout_s}s ({type(e).__name__})") from e
        except httpx.HTTPError as e:
            raise _Retry(f"the judge at {self.url} is unreachable: {type(e).__name__}: {e}") from e
        if reply.status_code != 200:
            message = f"the judge answered HTTP {reply.status_code}: {reply.text[:500]}"
            raise (_Retry if reply.status_code in _RETRIED_STATUS else _Final)(message)
        try:
            content = reply.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError) as e:
            raise _Final(f"the judge's reply is not a chat completion: {reply.text[:500]}") from e
        # NULs replaced: the store's text columns cannot hold them
        return content.replace("\x00", "\ufffd") if isinstance(content, str) else ""
