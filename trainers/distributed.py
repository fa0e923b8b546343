"""Process groups and FSDP plumbing for a learner sharded over several processes.

The learner runs data-parallel with fully sharded parameters (FSDP2, ``fully_shard``): every
process holds the same full batch, takes its slice of each mini-batch's rows, and the loss
denominators are all-reduced so the summed gradient equals the one-process gradient.

Launch (one process per GPU)::

    torchrun --nproc_per_node 4 -m agentgym.cli.main train configs/<run>.yaml

:func:`init_from_env` reads torchrun's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` /
``MASTER_ADDR`` / ``MASTER_PORT``; NCCL on GPU, gloo on CPU. Tests use :func:`spawn`, which
starts ``N`` gloo processes joined through a file rendezvous.

Every function here is a no-op (or the identity) when no process group is initialised, so the
single-process learner pays nothing.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "all_gather_rows", "all_reduce", "barrier", "broadcast", "broadcast_object", "comm_device",
    "fsdp_wrap", "full_model_state", "full_state", "init_from_env", "is_distributed", "is_main", "load_full_state",
    "local_rank", "merge_lora", "rank", "shard_rows", "shutdown", "spawn", "world_size",
]


# ------------------------------------------------------------------ process group
def is_distributed() -> bool:
    """A process group is initialised and has more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's global rank (0 without a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """The number of processes (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def local_rank() -> int:
    """This process's rank on its node (torchrun's ``LOCAL_RANK``; 0 when unset)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main() -> bool:
    """Rank 0 (or no process group): the process that logs, evaluates and writes checkpoints."""
    return rank() == 0


def init_from_env(backend: str | None = None, *, timeout_s: float = 3600.0, init_method: str | None = None) -> bool:
    """Initialise the default process group from torchrun's environment variables.

    Does nothing when ``WORLD_SIZE`` is unset or 1, or when a group already exists.

    Args:
        backend: ``"nccl"`` / ``"gloo"``; default NCCL when CUDA is available, else gloo.
        timeout_s: How long a collective waits for the slowest process (rank 0 may be busy
            rolling out or evaluating while the others wait for the next update).
        init_method: Rendezvous URL (default ``env://``: ``MASTER_ADDR`` / ``MASTER_PORT``).

    Returns:
        Whether this process is now part of a group of more than one process.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return is_distributed()
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend, init_method=init_method, rank=int(os.environ.get("RANK", "0")),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=datetime.timedelta(seconds=timeout_s))
    return is_distributed()


def shutdown(settle_s: float = 0.2, *, failed: bool = False) -> None:
    """Leave the process group so that the interpreter can exit cleanly (no-op without one).

    Call it once, after the last collective. A gloo worker thread releases a finished
    collective's tensors after the caller has already been woken, and releasing a tensor that
    Python knows needs the GIL. DTensor's caches keep the process group (and so those threads)
    alive until interpreter teardown, and a thread that asks for the GIL during teardown is
    killed inside C++: SIGABRT, "terminate called without an active exception", after the run
    itself succeeded. So every process first passes a barrier (all earlier collectives have
    finished everywhere) and then sleeps ``settle_s`` without holding the GIL, letting those
    threads finish their releases, before the group is destroyed.

    Args:
        settle_s: Seconds to wait after the barrier.
        failed: This process is leaving on an error: destroy the group at once, with no barrier
            (the other processes may never reach one).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if dist.get_world_size() > 1 and not failed:
        dist.barrier()
        time.sleep(settle_s)
    dist.destroy_process_group()


def comm_device() -> torch.device:
    """Where collective buffers live: the local GPU under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier() -> None:
    """Wait for every process (no-op without a group)."""
    if is_distributed():
        dist.barrier()


# ------------------------------------------------------------------ collectives
def all_reduce(values: Tensor, op: str = "sum") -> Tensor:
    """``values`` reduced over every process (``"sum"`` or ``"max"``); a copy, on ``values``' device."""
    if not is_distributed():
        return values.clone()
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
    buf = values.detach().to(comm_device(), torch.float64 if values.is_floating_point() else torch.int64)
    dist.all_reduce(buf, op=ops[op])
    return buf.to(values.device, values.dtype)


def broadcast(values: Tensor, src: int = 0) -> Tensor:
    """``values`` as held by rank ``src``, on every process (a copy, same device and dtype)."""
    if not is_distributed():
        return values.clone()
    buf = values.detach().to(comm_device()).contiguous()
    dist.broadcast(buf, src=src)
    return buf.to(values.device)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s picklable ``obj`` on every process (e.g. a step's trajectories); collective."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src, device=comm_device())
    return box[0]


def shard_rows(rows: Tensor, parts: int | None = None, index: int | None = None) -> Tensor:
    """This process's contiguous slice of ``rows`` (sizes differ by at most one; may be empty)."""
    parts = world_size() if parts is None else parts
    index = rank() if index is None else index
    return torch.tensor_split(rows, parts)[index]


def all_gather_rows(local: Tensor, sizes: list[int]) -> Tensor:
    """Concatenate every process's ``(sizes[r], ...)`` block in rank order.

    Args:
        local: This process's block; its first dimension is ``sizes[rank()]``.
        sizes: Every process's number of rows (blocks are padded to the largest for the wire).

    Returns:
        ``(sum(sizes), ...)`` on ``local``'s device.
    """
    if not is_distributed():
        return local
    most = max(sizes)
    pad = local.new_zeros((most - local.shape[0], *local.shape[1:]))
    buf = torch.cat([local, pad]).to(comm_device())
    out = [torch.empty_like(buf) for _ in sizes]
    dist.all_gather(out, buf)
    return torch.cat([block[:n] for block, n in zip(out, sizes, strict=True)]).to(local.device)


# ------------------------------------------------------------------ FSDP
def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks: the classes a ``transformers`` model lists in ``_no_split_modules``."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(inner, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:  # unknown architecture: the items of the longest ModuleList
        lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
        layers = list(max(lists, key=len)) if lists else []
    return layers


def fsdp_wrap(model: nn.Module, device: torch.device, *, bf16: bool = False) -> nn.Module:
    """Shard ``model`` in place with FSDP2: one unit per decoder layer plus the root.

    Gradients are summed over processes (no division by the world size): the learner's loss
    denominators are already global, so the sum is the one-process gradient.

    Args:
        model: The module, already on ``device`` with identical weights on every process.
        device: ``cuda:<local rank>`` or ``cpu``.
        bf16: bf16 parameters in forward/backward with fp32 gradient reduction (GPU).

    Returns:
        ``model`` (its parameters are now ``DTensor`` shards).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32)
    for layer in _decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # SUM with a post-division by 1: gloo has no PREMUL_SUM, NCCL is happy either way.
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def _options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def full_model_state(model: nn.Module) -> dict[str, Tensor]:
    """The unsharded model state dict on rank 0 (CPU tensors); ``{}`` on other ranks.

    Collective: every process must call it.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(cpu_offload=True))


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``{"model": ..., "optimizer": ...}`` unsharded on rank 0 (``{}`` values elsewhere); collective.

    The optimizer state is keyed by parameter name (``torch.distributed.checkpoint`` format).
    """
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options(cpu_offload=True))
    return {"model": model_sd, "optimizer": optim_sd}


def load_full_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load :func:`full_state` output held by rank 0 (other ranks may pass ``{}``); collective."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    # Two calls: set_state_dict would skip the model on ranks whose (ignored) model dict is empty.
    options = _options(broadcast_from_rank0=True)
    set_model_state_dict(model, state.get("model", {}), options=options)
    set_optimizer_state_dict(model, optimizer, state.get("optimizer", {}), options=options)


def merge_lora(state: dict[str, Tensor], model: nn.Module) -> dict[str, Tensor]:
    """Fold peft LoRA adapters of a full state dict into the base weights.

    ``W' = W + scaling * B @ A`` for every active adapter (transposed for ``fan_in_fan_out``
    layers), with the keys of the plain architecture (``base_model.model.`` and
    ``.base_layer`` removed, ``lora_*`` dropped), as ``merge_and_unload`` would give.

    Args:
        state: The peft model's full state dict (from :func:`full_model_state`).
        model: The peft model (only its module tree and adapter scalings are read).

    Returns:
        The merged state dict.
    """
    merged = dict(state)
    for name, module in model.named_modules():
        if not (hasattr(module, "lora_A") and hasattr(module, "scaling")):
            continue
        if any(getattr(module, "use_dora", {}).values()):
            raise NotImplementedError("merging DoRA adapters of a sharded model is not supported")
        weight_key = f"{name}.base_layer.weight"
        if weight_key not in merged:
            continue
        weight = merged[weight_key].clone()
        for adapter in module.active_adapters:
            if adapter not in module.lora_A:
                continue
            a = merged[f"{name}.lora_A.{adapter}.weight"].float()
            b = merged[f"{name}.lora_B.{adapter}.weight"].float()
            delta = (b @ a) * module.scaling[adapter]
            weight += (delta.T if getattr(module, "fan_in_fan_out", False) else delta).to(weight.dtype)
        merged[weight_key] = weight
    out = {}
    for key, value in merged.items():
        if ".lora_" in key:
            continue
        plain = key.removeprefix("base_model.model.").replace(".base_layer.", ".")
        out[plain] = value
    return out


# ------------------------------------------------------------------ tests
def _entry(index: int, fn: Callable[..., Any], world: int, store: str, backend: str, timeout_s: float,
           args: tuple[Any, ...]) -> None:
    os.environ.update(RANK=str(index), WORLD_SIZE=str(world), LOCAL_RANK=str(index))
    torch.set_num_threads(1)
    if not init_from_env(backend, timeout_s=timeout_s, init_method=f"file://{store}"):
        raise RuntimeError(f"process {index} of {world} did not join a process group")
    try:
        fn(*args)
    except BaseException:
        shutdown(failed=True)
        raise
    shutdown()


def spawn(fn: Callable[..., Any], world: int, *args: Any, backend: str = "gloo", timeout_s: float = 600.0) -> None:
    """Run ``fn(*args)`` in ``world`` fresh processes joined in one process group.

    ``fn`` must be importable by name (a module-level function). Raises if any process fails.

    Args:
        fn: The work of every process (use :func:`rank` inside).
        world: Number of processes.
        *args: Passed to ``fn`` (picklable).
        backend: ``"gloo"`` (CPU) or ``"nccl"``.
        timeout_s: Kill the processes and raise :class:`TimeoutError` after this long (a
            collective that only some processes reach waits forever).
    """
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:  # a file rendezvous: no port to race other jobs for
        store = os.path.join(folder, "rendezvous")
        context = mp.spawn(_entry, args=(fn, world, store, backend, timeout_s, args), nprocs=world, join=False)
        deadline = time.monotonic() + timeout_s
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise TimeoutError(f"{world} processes running {fn.__name__} did not finish within {timeout_s:.0f}s")
