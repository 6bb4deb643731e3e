"""The ``ringfence`` torch.distributed backend: a Python ``ProcessGroup`` over :class:`Group`.

Collectives run to completion in the calling thread and return a completed ``Work``; point-to-point
``send`` returns a ``Work`` completed by the sender thread (so two ranks may send to each other
before receiving). CPU tensors only.
"""

from __future__ import annotations

import datetime
import functools
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (  # type: ignore[attr-defined]
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    BroadcastOptions,
    ReduceOp,
    ReduceScatterOptions,
    _create_work_from_future,
)
from torch.futures import Future

from ringfence.secure.transport.config import TransportConfig, current_config
from ringfence.secure.transport.engine import (
    Group,
    Recv,
    Reducer,
    chain_broadcast,
    ring_allgather,
    ring_allreduce,
    ring_reduce_scatter,
)
from ringfence.secure.transport.reduce import make_reducer
from ringfence.secure.transport.wire import TransportError

BACKEND_NAME = "ringfence"
_P2P_HEADER = 16
_SUPPORTED = {
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
}


def _done(result: object) -> Any:
    fut: Future[object] = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _bytes(t: torch.Tensor) -> memoryview:
    return t.reshape(-1).view(torch.uint8).numpy().data


@contextmanager
def _contiguous(tensors: Sequence[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """Contiguous CPU versions of ``tensors``; results are copied back to non-contiguous originals."""
    work = []
    for t in tensors:
        if t.device.type != "cpu":
            raise TransportError(f"the ringfence backend handles CPU tensors, got one on {t.device}")
        if t.dtype not in _SUPPORTED:
            raise TransportError(f"the ringfence backend does not handle dtype {t.dtype}")
        work.append(t.detach() if t.is_contiguous() else t.detach().contiguous())
    yield work
    for t, w in zip(tensors, work, strict=True):
        if w.data_ptr() != t.data_ptr():
            t.detach().copy_(w)


def _op_kind(op: Any) -> str:
    kind = op.op if hasattr(op, "op") else op
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX"):
        if kind == getattr(ReduceOp.RedOpType, name):
            return name
    raise TransportError(f"the ringfence backend does not support reduce op {op}")


@functools.cache
def _reducer(dtype: torch.dtype, kind: str) -> Reducer:
    # cached: small all-reduces are dominated by per-call overhead (a few dozen dtype × op pairs at most)
    return make_reducer(str(dtype).removeprefix("torch."), kind)


class RingfenceProcessGroup(dist.ProcessGroup):
    """torch.distributed process group whose every byte between ranks is authenticated and encrypted."""

    def __init__(
        self, store: Any, rank: int, world: int, timeout: datetime.timedelta, config: TransportConfig | None = None
    ) -> None:
        super().__init__(rank, world)  # type: ignore[call-arg]
        self._group = Group.connect(store, rank, world, config or current_config(rank), timeout=timeout.total_seconds())
        self._lock = threading.Lock()  # one collective at a time per group (the links are ordered streams)

    @property
    def transport(self) -> Group:
        """The underlying connected group (links, failure state)."""
        return self._group

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        """``"ringfence"``."""
        return BACKEND_NAME

    # ------------------------------------------------------------ collectives
    def allreduce(  # type: ignore[override]
        self, tensors: list[torch.Tensor], opts: Any = None
    ) -> Any:
        """All-reduce each tensor (sum, avg, product, min, max)."""
        kind = _op_kind((opts or AllreduceOptions()).reduceOp)
        g = self._group
        with self._lock, _contiguous(tensors) as work:
            for t in work:
                if kind == "AVG" and not t.is_floating_point():
                    raise TransportError("ReduceOp.AVG needs a floating-point tensor")
                if g.world > 1:
                    g.run(
                        *ring_allreduce(_bytes(t), t.element_size(), g.rank, g.world, g.chunk), _reducer(t.dtype, kind)
                    )
                if kind == "AVG":
                    t.div_(g.world)
        return _done(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        """All-reduce several tensors (one after the other; the pipeline keeps the link busy)."""
        o = AllreduceOptions()
        o.reduceOp = (opts or AllreduceCoalescedOptions()).reduceOp
        return self.allreduce(tensors, o)

    def broadcast(  # type: ignore[override]
        self, tensors: list[torch.Tensor], opts: Any = None
    ) -> Any:
        """Broadcast from ``opts.rootRank`` along a pipelined chain."""
        root = (opts or BroadcastOptions()).rootRank
        g = self._group
        with self._lock, _contiguous(tensors) as work:
            for t in work:
                if g.world > 1:
                    g.run(*chain_broadcast(_bytes(t), root, g.rank, g.world, g.chunk))
        return _done(tensors)

    def allgather(  # type: ignore[override]
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        """All-gather: ``outputs[i][r]`` receives rank r's ``inputs[i]``."""
        g = self._group
        with self._lock:
            for outs, inp in zip(outputs, inputs, strict=True):
                if len(outs) != g.world or any(o.numel() != inp.numel() or o.dtype != inp.dtype for o in outs):
                    raise TransportError("all_gather needs world_size outputs shaped like the input")
                with _contiguous(outs) as work:
                    work[g.rank].view(-1).copy_(inp.detach().reshape(-1))
                    if g.world > 1:
                        g.run(*ring_allgather([_bytes(w) for w in work], g.rank, g.world, g.chunk))
        return _done(outputs)

    def _allgather_base(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> Any:
        """All-gather into one tensor of ``world * inp.numel()`` elements."""
        if output.numel() != inp.numel() * self._group.world:
            raise TransportError("all_gather_into_tensor needs an output of world_size × input elements")
        with _contiguous([output]) as (flat,):
            self.allgather([list(flat.view(-1).chunk(self._group.world))], [inp], AllgatherOptions())
        return _done(output)

    def all_gather_single(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> Any:
        """torch ≥ 2.13's name for :meth:`_allgather_base` (``dist.all_gather_single``)."""
        return self._allgather_base(output, inp, opts)

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        """Several :meth:`_allgather_base` in a row."""
        for o, i in zip(outputs, inputs, strict=True):
            self._allgather_base(o, i, opts)
        return _done(outputs)

    def reduce_scatter(  # type: ignore[override]
        self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None
    ) -> Any:
        """``outputs[i]`` = reduction over ranks of their ``inputs[i][rank]``."""
        kind = _op_kind((opts or ReduceScatterOptions()).reduceOp)
        g = self._group
        with self._lock:
            for out, ins in zip(outputs, inputs, strict=True):
                if len(ins) != g.world or any(t.numel() != out.numel() for t in ins):
                    raise TransportError("reduce_scatter needs world_size inputs shaped like the output")
                work = torch.cat([t.detach().reshape(-1) for t in ins])
                if g.world > 1:
                    g.run(
                        *ring_reduce_scatter(_bytes(work), work.element_size(), g.rank, g.world, g.chunk),
                        _reducer(work.dtype, kind),
                    )
                mine = work.view(g.world, -1)[g.rank]
                if kind == "AVG":
                    mine.div_(g.world)
                out.detach().view(-1).copy_(mine)
        return _done(outputs)

    def _reduce_scatter_base(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> Any:
        """Reduce-scatter of one flat input of ``world * output.numel()`` elements."""
        if inp.numel() != output.numel() * self._group.world:
            raise TransportError("reduce_scatter_tensor needs an input of world_size × output elements")
        return self.reduce_scatter([output], [list(inp.reshape(-1).chunk(self._group.world))], opts)

    def reduce_scatter_single(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> Any:
        """torch ≥ 2.13's name for :meth:`_reduce_scatter_base` (``dist.reduce_scatter_single``)."""
        return self._reduce_scatter_base(output, inp, opts)

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        """Several :meth:`_reduce_scatter_base` in a row."""
        for o, i in zip(outputs, inputs, strict=True):
            self._reduce_scatter_base(o, i, opts)
        return _done(outputs)

    def barrier(self, opts: Any = None) -> Any:
        """Every rank has arrived (an all-reduce of one element)."""
        self.allreduce([torch.zeros(1, dtype=torch.int32)])
        return _done(None)

    # ----------------------------------------------------------- point to point
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        """Send to ``dst``; a header record carries tag and size so a mismatch fails closed."""
        g = self._group
        fut: Future[object] = Future()
        keep = [t.detach().contiguous() for t in tensors]
        parts: list[memoryview] = []
        for t in keep:
            nbytes = t.numel() * t.element_size()
            parts.append(memoryview(tag.to_bytes(8, "big", signed=True) + nbytes.to_bytes(8, "big")))
            parts.extend(g.chunks_of(_bytes(t)))

        def done(err: TransportError | None) -> None:
            if err is None:
                fut.set_result(keep)
            else:
                fut.set_exception(err)

        with self._lock:
            g.send_async(dst, parts, done)
        return _create_work_from_future(fut)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        """Receive from ``src`` (blocking); tag and size must match the sender's."""
        g = self._group
        with self._lock, _contiguous(tensors) as work:
            for t in work:
                head = bytearray(_P2P_HEADER)
                g.run([], [Recv(src, memoryview(head))])
                got_tag = int.from_bytes(head[:8], "big", signed=True)
                size = int.from_bytes(head[8:], "big")
                want = t.numel() * t.element_size()
                if got_tag != tag or size != want:
                    err = TransportError(
                        f"rank {src} sent tag {got_tag} with {size} bytes; this rank expected tag {tag} with {want}",
                        peer=src,
                    )
                    g.abort(err)
                    raise err
                g.run([], [Recv(src, c) for c in g.chunks_of(_bytes(t))])
        return _done(tensors)

    def shutdown(self) -> None:
        """Close the links (called by ``destroy_process_group``)."""
        self._group.close()


def create_process_group(store: Any, rank: int, world: int, timeout: datetime.timedelta) -> RingfenceProcessGroup:
    """The creator torch calls for ``init_process_group("ringfence")``."""
    return RingfenceProcessGroup(store, rank, world, timeout)


def register_backend() -> None:
    """Register ``ringfence`` with torch.distributed (idempotent)."""
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND_NAME, create_process_group, devices=["cpu"])


__all__ = ["BACKEND_NAME", "RingfenceProcessGroup", "create_process_group", "register_backend"]
