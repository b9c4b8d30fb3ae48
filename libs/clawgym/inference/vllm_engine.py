"""The vLLM engine: the `Engine` interface over vLLM's AsyncLLM, for GPU serving.

Owns the mapping of clawgym requests onto vLLM (token-id prompts, sampled-token logprobs,
request ids for aborts), the engine arguments, and the weight swap. What runs inside vLLM's
workers is `vllm_worker.WeightSyncExtension`, called by method name through `collective_rpc`:
nothing here sends a function. vLLM is imported lazily, in `VllmEngine.from_config` and the
methods: nothing here is needed, or importable, on a CPU machine. Every vLLM name used here is
checked against the pinned vLLM by tests/contracts (deploy/vllm.md).

Logprobs: the engine is started with `logprobs_mode="processed_logprobs"`, so the logprob vLLM
returns for the sampled token (`logprobs=0`) is taken after temperature, as the interface asks.
Greedy requests report the temperature-1 logprob (vLLM divides greedy rows by 1). Departure: with
top-k/top-p truncation vLLM renormalises over the kept tokens before taking the log, while the
torch engine reports the untruncated tempered logprob; with top_p=1 and top_k=0 (RL sampling)
the two agree.

Weight swap (`load_weights` from files, `push_weights` from a trainer's CUDA tensors), in order:
1. the new checkpoint's names and shapes are checked against the served one: a misfit raises
   FailedPrecondition with the old weights serving;
2. `pause_generation(mode="keep")`: no engine step runs; requests stay queued;
3. every token the old weights produced is drained from vLLM into this process and tagged with
   the old version (each request has a pump that reads vLLM's stream as it comes, so a slow
   client cannot leave old tokens unread past the swap);
4. the workers load the tensors (`collective_rpc("clawgym_load_…")`);
5. `reset_prefix_cache(reset_running_requests=True)`, checked and retried: cached prefixes and the
   KV of running requests (computed by the old weights) are dropped, running requests are
   re-queued and recompute their KV with the new weights;
6. only then does the version tag change, and generation resumes.
So every token is produced by one set of weights over a KV cache those weights computed, and
carries that set's version. A reset that never succeeds leaves new weights behind a stale cache:
the engine then reports itself dead (status raises Unavailable) rather than serve mixed tokens.
"""

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from clawgym.errors import FailedPrecondition, Unavailable
from clawgym.inference.config import InferenceConfig
from clawgym.inference.interface import (
    EngineStatus,
    FinishReason,
    PromptIds,
    SamplingParams,
    TokenChunk,
    id_list,
)
from clawgym.inference.validation import validate_request

# The vLLM type of each object this module reaches into (tests/contracts checks every call and
# attribute through them against the pinned vLLM).
VLLM_TYPES = {
    "self._llm": "vllm.v1.engine.async_llm.AsyncLLM",
    "llm": "vllm.v1.engine.async_llm.AsyncLLM",
    "model_config": "vllm.config.ModelConfig",
    "out": "vllm.outputs.RequestOutput",
    "completion": "vllm.outputs.CompletionOutput",
}
FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def checkpoint_header(folder: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name → shape of every `*.safetensors` file in a local folder (headers only, no data)."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FailedPrecondition(f"checkpoint {str(folder)!r} has no *.safetensors files")
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118
                    shapes[name] = tuple(f.get_slice(name).get_shape())
        except Exception as e:
            raise FailedPrecondition(f"cannot read {path.name} of {str(folder)!r}: {e}") from e
    return shapes


def check_fits(new: dict[str, tuple[int, ...]], served: dict[str, tuple[int, ...]], uri: str) -> None:
    """FailedPrecondition unless `new` has the served checkpoint's names and shapes (tied lm_head optional)."""
    optional = {"lm_head.weight"} if "lm_head.weight" not in served else set()
    unknown = sorted(set(new) - set(served) - optional)
    missing = sorted(set(served) - set(new))
    wrong = sorted(f"{n} {new[n]} != {s}" for n, s in served.items() if n in new and new[n] != s)
    if unknown or missing or wrong:
        raise FailedPrecondition(
            f"checkpoint {uri!r} does not fit the served model: "
            f"{len(unknown)} unknown ({', '.join(unknown[:3])}), {len(missing)} missing "
            f"({', '.join(missing[:3])}), {len(wrong)} shape mismatches ({'; '.join(wrong[:3])})"
        )


WORKER_EXTENSION = "clawgym.inference.vllm_worker.WeightSyncExtension"
RESET_RETRY_S = 0.05  # between tries at dropping the prefix cache after a swap
DRAIN_QUIET_S = 0.01  # a paused engine's streams count as drained after two checks this far apart
DRAIN_LIMIT_S = 5.0


def engine_args(cfg: InferenceConfig, folder: Path):
    """vLLM's AsyncEngineArgs for `cfg` serving the model in `folder`."""
    from vllm.config import CompilationConfig, CompilationMode
    from vllm.engine.arg_utils import AsyncEngineArgs

    compile_mode = CompilationMode.NONE if cfg.compile == "off" else None
    return AsyncEngineArgs(
        model=str(folder),
        dtype=cfg.dtype,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        max_model_len=cfg.max_model_len or None,
        max_num_seqs=cfg.max_batch,
        tensor_parallel_size=cfg.tensor_parallel_size,
        enforce_eager=cfg.enforce_eager,
        compilation_config=CompilationConfig(mode=compile_mode),  # None: vLLM's choice
        logprobs_mode="processed_logprobs",  # sampled-token logprobs after temperature
        enable_prefix_caching=True,
        worker_extension_cls=WORKER_EXTENSION,
    )


def sampling_params(params: SamplingParams, limit: int):
    """vLLM's SamplingParams for one request: token ids only, the sampled token's logprob, deltas."""
    from vllm import SamplingParams as VllmSamplingParams
    from vllm.sampling_params import RequestOutputKind

    return VllmSamplingParams(
        max_tokens=limit,
        temperature=params.temperature,
        top_p=params.top_p if params.top_p > 0 else 1.0,
        top_k=params.top_k,  # 0 = off
        stop_token_ids=list(params.stop_token_ids),
        ignore_eos=True,  # stopping is the caller's choice, through stop_token_ids
        seed=params.seed,
        logprobs=0,  # the sampled token's logprob only
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
    )


def tokens_prompt(ids: list[int]):
    """vLLM's prompt of token ids (nothing is tokenized)."""
    from vllm.inputs import TokensPrompt

    return TokensPrompt(prompt_token_ids=ids)


class VllmEngine:
    """An `Engine` over a vLLM AsyncLLM holding one model on the GPU(s)."""

    def __init__(
        self,
        llm,
        *,
        name: str,
        folder: Path,
        max_context: int,
        vocab_size: int,
        version: int = 0,
        weight_sync: str = "files",
        reset_attempts: int = 20,
    ):
        self._llm = llm
        self.name = name
        self.folder = folder
        self.max_context = max_context
        self.vocab_size = vocab_size
        self.weight_sync = weight_sync
        self.reset_attempts = reset_attempts
        self._version = version
        self._served_header = checkpoint_header(folder)
        self._reload_lock = asyncio.Lock()
        self._reloading = False
        self._dead: str | None = None
        self._running = 0
        self._pulled = 0  # outputs read from vLLM by every pump so far (the drain watches it)
        self._ids = itertools.count()

    @classmethod
    def from_config(cls, cfg: InferenceConfig) -> "VllmEngine":
        """Starts vLLM on the folder of `cfg.model` (built-in specs are built into the cache first)."""
        from vllm.v1.engine.async_llm import AsyncLLM

        from clawgym.policies import resolve_model

        folder = resolve_model(cfg.model, cache_dir=Path(cfg.cache_dir).expanduser())
        llm = AsyncLLM.from_engine_args(engine_args(cfg, folder))
        model_config = llm.model_config
        return cls(
            llm,
            name=cfg.model,
            folder=folder,
            max_context=model_config.max_model_len,
            vocab_size=model_config.get_vocab_size(),
            version=cfg.policy_version,
            weight_sync=cfg.weight_sync,
            reset_attempts=cfg.reload_reset_attempts,
        )

    async def generate(
        self, prompt_ids: PromptIds, params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        prompt = id_list(prompt_ids)
        limit = validate_request(prompt, params, self.vocab_size, self.max_context)
        sampling = sampling_params(params, limit)
        # vLLM needs ids unique across its lifetime; the caller's id is kept for its logs.
        vllm_id = f"{request_id or 'req'}-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        chunks: asyncio.Queue[TokenChunk | BaseException | None] = asyncio.Queue()

        async def pump() -> None:
            # Reads vLLM's stream as fast as it comes and tags each token on arrival, whatever the
            # consumer's pace: the swap drains these before it changes the version (module doc, 3).
            try:
                async for out in self._llm.generate(tokens_prompt(prompt), sampling, vllm_id):
                    self._pulled += 1
                    chunk = _chunk(out, self._version)
                    if chunk is not None:
                        chunks.put_nowait(chunk)
                    if out.finished:
                        break
            except Exception as e:  # the consumer raises it
                chunks.put_nowait(e)
            finally:
                chunks.put_nowait(None)

        self._running += 1
        task = asyncio.create_task(pump())
        finished = False
        try:
            while (chunk := await chunks.get()) is not None:
                if isinstance(chunk, BaseException):
                    raise chunk
                finished = chunk.finish_reason is not None
                yield chunk
                if finished:
                    return
        finally:
            self._running -= 1
            if not task.done():
                task.cancel()
            if not finished:
                await self._llm.abort(vllm_id)

    async def load_weights(self, version: int, uri: str) -> float:
        """Every worker reads the checkpoint folder `uri` (a local path or file:// URI)."""
        started = time.perf_counter()
        folder = Path(uri.removeprefix("file://"))
        if "://" in uri and not uri.startswith("file://"):
            raise FailedPrecondition(
                f"the vLLM engine loads local folders only (mount the checkpoint): {uri!r}"
            )
        header = await asyncio.to_thread(checkpoint_header, folder)
        check_fits(header, self._served_header, uri)
        files = [str(p) for p in sorted(folder.glob("*.safetensors"))]
        await self._swap(version, "clawgym_load_files", files)
        return time.perf_counter() - started

    async def push_weights(self, version: int, named_tensors) -> float:
        """`inference.weight_sync=cuda_ipc`: the caller's CUDA tensors (HF names), on the workers' GPU,
        handed over as CUDA IPC handles; the tensors need to live only until this returns."""
        from clawgym.inference.vllm_worker import cuda_ipc_payload

        if self.weight_sync != "cuda_ipc":
            raise FailedPrecondition(
                f"push_weights needs inference.weight_sync=cuda_ipc, not {self.weight_sync}"
            )
        started = time.perf_counter()
        payload, alive = cuda_ipc_payload(named_tensors)
        check_fits({n: tuple(h["size"]) for n, h in payload.items()}, self._served_header, "pushed weights")
        await self._swap(version, "clawgym_load_cuda_ipc", payload)
        del alive  # the workers copied every tensor before the RPC returned
        return time.perf_counter() - started

    async def _swap(self, version: int, method: str, payload) -> None:
        """Steps 2-6 of the module doc: pause, drain, load on every worker, reset, tag, resume."""
        if self._dead:
            raise Unavailable(self._dead)
        async with self._reload_lock:
            self._reloading = True
            await self._llm.pause_generation(mode="keep", clear_cache=False)
            try:
                await self._drain()
                await self._llm.collective_rpc(method, args=(payload,))
                await self._reset_prefix_cache(version)
                self._version = version
            finally:
                await self._llm.resume_generation()
                self._reloading = False

    async def _drain(self) -> None:
        """Waits until the paused engine's last outputs have reached the pumps (and got the old tag)."""
        deadline = time.monotonic() + DRAIN_LIMIT_S
        seen, quiet = -1, 0
        while quiet < 2 and time.monotonic() < deadline:
            quiet = quiet + 1 if self._pulled == seen else 0
            seen = self._pulled
            await asyncio.sleep(DRAIN_QUIET_S)

    async def _reset_prefix_cache(self, version: int) -> None:
        for _ in range(self.reset_attempts):
            if await self._llm.reset_prefix_cache(reset_running_requests=True):
                return
            await asyncio.sleep(RESET_RETRY_S)
        # New weights sit behind a KV cache the old ones computed: refuse to serve from it.
        self._dead = (
            f"weights of version {version} were loaded but vLLM did not drop its prefix cache in "
            f"{self.reset_attempts} tries; restart the inference service"
        )
        raise Unavailable(self._dead)

    async def status(self) -> EngineStatus:
        if self._llm.errored:
            raise Unavailable(f"vLLM engine is dead: {self._llm.dead_error}")
        if self._dead:
            raise Unavailable(self._dead)
        return EngineStatus(
            model=self.name,
            policy_version=self._version,
            max_context=self.max_context,
            vocab_size=self.vocab_size,
            running=self._running,
            waiting=0,
            ready=not self._reloading,
        )

    async def aclose(self) -> None:
        self._llm.shutdown()


def _chunk(out, version: int) -> TokenChunk | None:
    """One vLLM RequestOutput delta as a TokenChunk, every token tagged `version`; None if empty."""
    completion = out.outputs[0]
    ids = list(completion.token_ids)
    logprobs = [step[token].logprob for step, token in zip(completion.logprobs or [], ids, strict=False)]
    finish: FinishReason | None = FINISH.get(completion.finish_reason) if out.finished else None
    if out.finished and finish is None:
        finish = "stop"
    if not ids and finish is None:
        return None
    return TokenChunk(ids, logprobs, [version] * len(ids), finish)
