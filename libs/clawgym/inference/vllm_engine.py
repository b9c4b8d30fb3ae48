"""The vLLM engine: the `Engine` interface over vLLM's AsyncLLM, for GPU serving.

Owns the mapping of clawgym requests onto vLLM (token-id prompts, sampled-token logprobs,
request ids for aborts) and hot reload through vLLM's worker RPC. vLLM is imported lazily, in
`VllmEngine.create`: nothing here is needed, or importable, on a CPU machine.
Supported vLLM versions and how to run it: deploy/vllm.md.

Logprobs: the engine is started with `logprobs_mode="processed_logprobs"`, so the logprob vLLM
returns for the sampled token (`logprobs=0`) is taken after temperature, as the interface asks.
Greedy requests report the temperature-1 logprob (vLLM divides greedy rows by 1). Departure: with
top-k/top-p truncation vLLM renormalises over the kept tokens before taking the log, while the
torch engine reports the untruncated tempered logprob; with top_p=1 and top_k=0 (RL sampling)
the two agree.

Hot reload: the checkpoint's safetensors headers are checked (names and shapes) against the
served model's own checkpoint before anything is touched, so a misfit raises FailedPrecondition
with the old weights serving. Then generation is paused with `mode="keep"` (requests stay in
the batch), every worker loads the tensors through the model's `load_weights` (which maps HF
names onto vLLM's fused layers), the prefix cache is reset (its entries were computed by the
old weights), and generation resumes. Tokens that reach this process after the resume carry
the new version; the KV cache of running requests is kept, as in the torch engine.
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

FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def _load_checkpoint_on_worker(worker, files: list[str]) -> int:
    """Runs inside each vLLM worker (sent by collective_rpc): streams the files into the model."""
    from safetensors import safe_open

    model = worker.model_runner.model

    def tensors():
        for path in files:
            with safe_open(path, framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open handles have no __iter__
                    yield name, f.get_tensor(name)

    loaded = model.load_weights(tensors())
    return len(loaded) if loaded is not None else 0


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


class VllmEngine:
    """An `Engine` over a vLLM AsyncLLM holding one model on the GPU(s)."""

    def __init__(self, llm, *, name: str, folder: Path, max_context: int, vocab_size: int, version: int = 0):
        self._llm = llm
        self.name = name
        self.folder = folder
        self.max_context = max_context
        self.vocab_size = vocab_size
        self._version = version
        self._served_header = checkpoint_header(folder)
        self._reload_lock = asyncio.Lock()
        self._reloading = False
        self._running = 0
        self._ids = itertools.count()

    @classmethod
    def from_config(cls, cfg: InferenceConfig) -> "VllmEngine":
        """Starts vLLM on the folder of `cfg.model` (built-in specs are built into the cache first)."""
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from clawgym.policies import resolve_model

        folder = resolve_model(cfg.model, cache_dir=Path(cfg.cache_dir).expanduser())
        args = AsyncEngineArgs(
            model=str(folder),
            dtype=cfg.dtype,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len or None,
            max_num_seqs=cfg.max_batch,
            logprobs_mode="processed_logprobs",  # sampled-token logprobs after temperature
            enable_prefix_caching=True,
        )
        llm = AsyncLLM.from_engine_args(args)
        model_config = llm.model_config
        return cls(
            llm,
            name=cfg.model,
            folder=folder,
            max_context=model_config.max_model_len,
            vocab_size=model_config.get_vocab_size(),
            version=cfg.policy_version,
        )

    async def generate(
        self, prompt_ids: PromptIds, params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        from vllm import SamplingParams as VllmSamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        prompt = id_list(prompt_ids)
        limit = validate_request(prompt, params, self.vocab_size, self.max_context)
        sampling = VllmSamplingParams(
            max_tokens=limit,
            temperature=params.temperature,
            top_p=params.top_p if params.top_p > 0 else 1.0,
            top_k=params.top_k,  # 0 = off (vLLM >= 0.11 accepts 0)
            stop_token_ids=list(params.stop_token_ids),
            ignore_eos=True,  # stopping is the caller's choice, through stop_token_ids
            seed=params.seed,
            logprobs=0,  # the sampled token's logprob only
            detokenize=False,
            output_kind=RequestOutputKind.DELTA,
        )
        # vLLM needs ids unique across its lifetime; the caller's id is kept for its logs.
        vllm_id = f"{request_id or 'req'}-{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        finished = False
        self._running += 1
        try:
            async for out in self._llm.generate(TokensPrompt(prompt_token_ids=prompt), sampling, vllm_id):
                completion = out.outputs[0]
                ids = list(completion.token_ids)
                logprobs = [
                    step[token].logprob for step, token in zip(completion.logprobs or [], ids, strict=False)
                ]
                finish: FinishReason | None = FINISH.get(completion.finish_reason) if out.finished else None
                if out.finished and finish is None:
                    finish = "stop"
                finished = out.finished
                if ids or finish:
                    # Tagged on arrival: a reload switches the version only while generation is paused.
                    yield TokenChunk(ids, logprobs, [self._version] * len(ids), finish)
                if finished:
                    return
        finally:
            self._running -= 1
            if not finished:
                await self._llm.abort(vllm_id)

    async def load_weights(self, version: int, uri: str) -> float:
        started = time.perf_counter()
        folder = Path(uri.removeprefix("file://"))
        if "://" in uri and not uri.startswith("file://"):
            raise FailedPrecondition(
                f"the vLLM engine loads local folders only (mount the checkpoint): {uri!r}"
            )
        header = await asyncio.to_thread(checkpoint_header, folder)
        check_fits(header, self._served_header, uri)
        files = [str(p) for p in sorted(folder.glob("*.safetensors"))]
        async with self._reload_lock:
            self._reloading = True
            paused = await _pause(self._llm)
            try:
                await self._llm.collective_rpc(_load_checkpoint_on_worker, args=(files,))
                await self._llm.reset_prefix_cache()
                self._version = version
            finally:
                if paused:
                    await self._llm.resume_generation()
                self._reloading = False
        return time.perf_counter() - started

    async def status(self) -> EngineStatus:
        if self._llm.errored:
            raise Unavailable(f"vLLM engine is dead: {self._llm.dead_error}")
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


async def _pause(llm) -> bool:
    """Pauses scheduling with running requests kept (vLLM with `mode="keep"`); False if unsupported."""
    try:
        await llm.pause_generation(mode="keep", clear_cache=False)
    except (TypeError, AttributeError):
        return False  # older vLLM: the RPC still runs between two engine steps, only the tagging is looser
    return True
