"""The host runner: the only process that loads a host candidate. It maps the judge's buffer (a memfd
whose descriptor it inherits, named in argv) and calls the candidate on the arrays the judge placed there.
Nothing it says is believed: the judge reads the output itself and takes every figure from its own clock."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import time

import numpy as np

from hiera_judge import judging
from hiera_judge.messages import (
    BatchDone,
    BatchOrder,
    BufferView,
    CallDone,
    CallOrder,
    Loaded,
    LoadOrder,
    Order,
    Prepared,
    Reply,
    StartBatch,
)


def view(arena: mmap.mmap, buffer: BufferView) -> np.ndarray:
    count = int(np.prod(buffer.shape, dtype=np.int64))
    return np.frombuffer(arena, dtype=buffer.dtype, count=count, offset=buffer.offset_bytes).reshape(buffer.shape)


def main() -> None:
    fd = int(sys.argv[1])
    arena = mmap.mmap(fd, os.fstat(fd).st_size)
    loaded = {}

    def handle(order: Order) -> Reply:
        if isinstance(order, LoadOrder):
            loaded["harness"] = judging.harness_of(order.workload_factory, order.workload_config, order.task, "host")
            loaded["lib"] = ctypes.CDLL(order.library)  # the candidate enters the process only now
            return Loaded()
        if isinstance(order, BatchOrder):  # prepared outside the judge's clock, before the inputs are there
            loaded["batch"] = [(call.case, *views(call)) for call in order.calls], order.null
            return Prepared()
        if isinstance(order, StartBatch):  # back to back, each on its own place; the judge's clock is the figure
            began = time.perf_counter()
            calls, null = loaded.pop("batch")
            calling = time.perf_counter()
            walls = [one(case, inputs, out, null=null) for case, inputs, out in calls]
            return BatchDone(in_process_ms=walls, stamps=[began, calling, time.perf_counter(), time.perf_counter()])
        assert isinstance(order, CallOrder)
        return CallDone(in_process_ms=one(order.case, *views(order), null=order.null))

    def views(order: CallOrder) -> tuple[dict[str, np.ndarray], np.ndarray]:
        return {name: view(arena, buffer) for name, buffer in order.inputs.items()}, view(arena, order.output)

    def one(case: dict, inputs: dict[str, np.ndarray], out: np.ndarray, *, null: bool) -> float:
        if null:
            return judging.timed_ms(lambda: None)
        harness, lib = loaded["harness"], loaded["lib"]
        return judging.timed_ms(lambda: harness.call(lib, case, inputs, out))

    judging.serve(handle)


if __name__ == "__main__":
    main()
