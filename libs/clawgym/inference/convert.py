"""Engine types <-> `clawgym.v1.inference` messages: the one place the wire spelling is mapped.

Arrays travel as packed little-endian bytes (`clawgym.arrays`). A malformed array is an
InvalidArgument. Used by the inference service and by its typed client, so both agree.
"""

from clawgym import arrays
from clawgym.errors import InvalidArgument
from clawgym.generated.v1 import common_pb2, inference_pb2
from clawgym.inference.interface import EngineStatus, FinishReason, PromptIds, SamplingParams, TokenChunk

FINISH_TO_PROTO: dict[FinishReason | None, int] = {
    None: common_pb2.FINISH_REASON_UNSPECIFIED,
    "stop": common_pb2.FINISH_REASON_STOP,
    "length": common_pb2.FINISH_REASON_LENGTH,
    "abort": common_pb2.FINISH_REASON_ABORT,
}
FINISH_FROM_PROTO = {v: k for k, v in FINISH_TO_PROTO.items()}


def params_to_proto(p: SamplingParams) -> inference_pb2.SamplingParams:
    msg = inference_pb2.SamplingParams(
        max_new_tokens=p.max_new_tokens,
        temperature=p.temperature,
        top_p=p.top_p,
        top_k=p.top_k,
        stop_token_ids=list(p.stop_token_ids),
    )
    if p.seed is not None:
        msg.seed = p.seed
    return msg


def params_from_proto(msg: inference_pb2.SamplingParams) -> SamplingParams:
    """The proto's zero values mean "off" for top_p (0 → 1.0); temperature 0 stays greedy."""
    return SamplingParams(
        max_new_tokens=msg.max_new_tokens,
        temperature=msg.temperature,
        top_p=msg.top_p if msg.top_p > 0 else 1.0,
        top_k=msg.top_k,
        stop_token_ids=tuple(msg.stop_token_ids),
        seed=msg.seed if msg.HasField("seed") else None,
    )


def request_to_proto(
    prompt_ids: PromptIds, params: SamplingParams, request_id: str
) -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(
        request_id=request_id, prompt_ids=arrays.pack_ids(prompt_ids), sampling=params_to_proto(params)
    )


def request_from_proto(msg: inference_pb2.GenerateRequest) -> tuple[list[int], SamplingParams]:
    try:
        prompt = arrays.unpack_ids(msg.prompt_ids).tolist()
    except arrays.ArrayError as e:
        raise InvalidArgument(f"prompt_ids: {e}") from e
    return prompt, params_from_proto(msg.sampling)


def chunk_to_proto(chunk: TokenChunk) -> inference_pb2.GenerateChunk:
    return inference_pb2.GenerateChunk(
        token_ids=arrays.pack_ids(chunk.token_ids),
        logprobs=arrays.pack_logprobs(chunk.logprobs),
        policy_versions=arrays.pack_ids(chunk.policy_versions),
        finish_reason=FINISH_TO_PROTO[chunk.finish_reason],
    )


def chunk_from_proto(msg: inference_pb2.GenerateChunk) -> TokenChunk:
    # Logprobs cross the wire as float32 (the store keeps float32 too): ~1e-7 relative rounding.
    return TokenChunk(
        token_ids=arrays.unpack_ids(msg.token_ids).tolist(),
        logprobs=arrays.unpack_logprobs(msg.logprobs).tolist(),
        policy_versions=arrays.unpack_ids(msg.policy_versions).tolist(),
        finish_reason=FINISH_FROM_PROTO.get(msg.finish_reason),
    )


def status_to_proto(s: EngineStatus) -> inference_pb2.InferenceStatus:
    return inference_pb2.InferenceStatus(
        model=s.model,
        policy_version=s.policy_version,
        max_context=s.max_context,
        vocab_size=s.vocab_size,
        running=s.running,
        waiting=s.waiting,
        ready=s.ready,
    )


def status_from_proto(msg: inference_pb2.InferenceStatus) -> EngineStatus:
    return EngineStatus(
        model=msg.model,
        policy_version=msg.policy_version,
        max_context=msg.max_context,
        vocab_size=msg.vocab_size,
        running=msg.running,
        waiting=msg.waiting,
        ready=msg.ready,
    )
