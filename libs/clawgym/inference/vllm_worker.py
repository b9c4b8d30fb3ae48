"""The code clawgym runs inside vLLM's workers: a worker extension whose methods load new weights.

vLLM mixes this class into each worker it starts when the engine is created with
`worker_extension_cls="clawgym.inference.vllm_worker.WeightSyncExtension"`; the engine process
then calls the methods by name through `AsyncLLM.collective_rpc("clawgym_load_files", …)`, so
no Python function travels between processes. Every argument is plain data (str, int, bytes,
lists, dicts). This module imports only torch and safetensors, lazily, so it can be imported
(and checked against vLLM's worker, tests/contracts) without a GPU.

Two ways in, chosen by `inference.weight_sync`:
- `files`: each worker reads the checkpoint's safetensors files itself (any node, a mounted folder);
- `cuda_ipc`: the trainer on the same node exports its tensors as CUDA IPC handles
  (`cuda_ipc_payload`) and each worker maps them without a copy through disk, as vLLM's RLHF
  colocation example does; the handles are sent as plain fields, and the worker rebuilds them with
  torch's own `rebuild_cuda_tensor`.

Either way the model's `load_weights` maps HF names onto vLLM's fused layers (qkv, gate_up).
What it does not own: pausing generation and the prefix cache (`vllm_engine`).
"""

from collections.abc import Iterable, Iterator
from typing import Any

# `self` in the extension is vLLM's worker (tests/contracts checks what is read from it).
VLLM_TYPES = {"self": "vllm.v1.worker.gpu_worker.Worker"}
# One tensor as a CUDA IPC handle in plain data: torch's reduce_tensor fields minus the classes.
IpcTensor = dict[str, Any]


class WeightSyncExtension:
    """Mixed into vLLM's GPU worker (`self` is the worker: `self.model_runner`, `self.device`).

    Method names carry a `clawgym_` prefix: vLLM refuses an extension whose names collide with
    the worker's own attributes.
    """

    def clawgym_load_files(self, files: list[str]) -> int:
        """Streams the safetensors `files` into the served model; the number of tensors loaded."""
        return _load(self.model_runner.model, _read_files(files))  # type: ignore[attr-defined]

    def clawgym_load_cuda_ipc(self, tensors: dict[str, IpcTensor]) -> int:
        """Maps the trainer's tensors (`cuda_ipc_payload`) into this worker and loads them."""
        import torch

        here = torch.cuda.get_device_properties(self.device).uuid  # type: ignore[attr-defined]

        def opened() -> Iterator[tuple[str, Any]]:
            for name, handle in tensors.items():
                if handle["gpu_uuid"] != str(here):
                    raise RuntimeError(
                        f"cuda_ipc: {name} lives on GPU {handle['gpu_uuid']}, this worker runs on {here}; "
                        "CUDA IPC shares memory within one GPU: use inference.weight_sync=files"
                    )
                yield name, _rebuild(handle, self.device)  # type: ignore[attr-defined]

        loaded = _load(self.model_runner.model, opened())  # type: ignore[attr-defined]
        torch.cuda.synchronize(self.device)  # type: ignore[attr-defined]
        return loaded

    def clawgym_weight_checksum(self) -> float:
        """Sum of every parameter in float64: tells two weight sets apart (tests, bench)."""
        import torch

        with torch.no_grad():
            return float(sum(p.double().sum().item() for p in self.model_runner.model.parameters()))  # type: ignore[attr-defined]


def _load(model: Any, tensors: Iterable[tuple[str, Any]]) -> int:
    loaded = model.load_weights(tensors)
    return len(loaded) if loaded is not None else 0


def _read_files(files: list[str]) -> Iterator[tuple[str, Any]]:
    from safetensors import safe_open

    for path in files:
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open handles have no __iter__
                yield name, f.get_tensor(name)


# --- CUDA IPC as plain data ---


def cuda_ipc_payload(named_tensors: Iterable[tuple[str, Any]]) -> tuple[dict[str, IpcTensor], list[Any]]:
    """The trainer's side: name → IPC handle fields of each CUDA tensor (HF names), and the tensors
    the handles point into, which the caller keeps alive until every worker has loaded them."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    payload: dict[str, IpcTensor] = {}
    alive: list[Any] = []
    for name, tensor in named_tensors:
        if tensor.device.type != "cuda":
            raise ValueError(f"cuda_ipc needs CUDA tensors; {name} is on {tensor.device}")
        t = tensor.detach().contiguous()
        alive.append(t)
        _, fields = reduce_tensor(t)
        (_, size, stride, offset, _, dtype, device, handle, nbytes, offset_bytes, _, rc_handle, rc_offset,
         event, event_sync) = fields  # fmt: skip
        payload[name] = {
            "gpu_uuid": str(torch.cuda.get_device_properties(device).uuid),
            "size": list(size),
            "stride": list(stride),
            "offset": offset,
            "dtype": str(dtype).removeprefix("torch."),
            "handle": handle,
            "nbytes": nbytes,
            "offset_bytes": offset_bytes,
            "ref_counter_handle": rc_handle,
            "ref_counter_offset": rc_offset,
            "event_handle": event,
            "event_sync_required": event_sync,
        }
    return payload, alive


def _rebuild(h: IpcTensor, device: Any) -> Any:
    """The worker's side: torch's own `rebuild_cuda_tensor` on this worker's device."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size(h["size"]), tuple(h["stride"]), h["offset"], torch.UntypedStorage,
        getattr(torch, h["dtype"]), torch.device(device).index or 0, h["handle"], h["nbytes"],
        h["offset_bytes"], False, h["ref_counter_handle"], h["ref_counter_offset"], h["event_handle"],
        h["event_sync_required"],
    )  # fmt: skip
