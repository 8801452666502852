"""The host runner: the only process that loads a host candidate. It maps the judge's buffer (a memfd
whose descriptor it inherits, named in argv) and calls the candidate on the arrays the judge placed there.
Nothing it says is believed: the judge reads the output itself and times every call with its own clock."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys

import numpy as np

from hiera_core import judging
from hiera_core.records import BufferView, CallDone, CallOrder, LoadOrder, Loaded, Order, Reply


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
        assert isinstance(order, CallOrder)
        inputs = {name: view(arena, buffer) for name, buffer in order.inputs.items()}
        out = view(arena, order.output)
        if order.null:
            wall, cpu = judging.timed_ms(lambda: None)
        else:
            harness, lib = loaded["harness"], loaded["lib"]
            wall, cpu = judging.timed_ms(lambda: harness.call(lib, order.case, inputs, out))
        return CallDone(in_process_ms=wall, cpu_ms=cpu)

    judging.serve(handle)


if __name__ == "__main__":
    main()
