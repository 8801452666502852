"""Does a kernel's figure change with where its output's write-back is paid? (a probe, not a test)

The runner's in-process events time one call after an L2 flush: the lines the call leaves dirty in L2 (up to the L2's
size of its output) are written back to memory by the *next* flush, outside the call's window. The judge's batches
run calls back to back on places of their own after one flush: each call pays the write-back of the one before. For
a memory-bound kernel the difference is up to L2-size / bandwidth a call (50 MB / 3 TB/s ≈ 17 us on an H100).

This probe times a device-to-device copy of the stencil's size (10240² FP64 in, the same out: 1677.7 MB a call) both
ways, on fresh buffers each call, and prints each figure and the difference.

    python3 research/probe_writeback.py
"""

from __future__ import annotations

import statistics

import torch

N = 10240 * 10240  # the stencil case study's field, FP64
CALLS = 8
FLUSH_BYTES = 256 << 20


def main() -> None:
    src = [torch.rand(N, dtype=torch.float64, device="cuda") for _ in range(CALLS)]
    dst = [torch.empty_like(s) for s in src]
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(CALLS)]
    one, batch = [], []
    for _ in range(10):
        for (start, end), s, d in zip(events, src, dst, strict=True):  # per call, flushed before, events around it
            flush.zero_()
            start.record()
            d.copy_(s)
            end.record()
        torch.cuda.synchronize()
        one += [start.elapsed_time(end) for start, end in events]
        flush.zero_()  # back to back after one flush, the batch's window
        first, last = events[0][0], events[0][1]
        first.record()
        for s, d in zip(src, dst, strict=True):
            d.copy_(s)
        last.record()
        torch.cuda.synchronize()
        batch.append(first.elapsed_time(last) / CALLS)
    a, b = statistics.median(one), statistics.median(batch)
    gb = 2 * N * 8 / 1e9
    print(f"{torch.cuda.get_device_name(0)}: copy of {gb * 1e3 / 2:.1f} MB, {CALLS} fresh buffers")
    print(f"per call after a flush (the runner's events): {a:.4f} ms ({gb / a * 1e3:.0f} GB/s)")
    print(f"back to back after one flush (the judge's batch): {b:.4f} ms a call ({gb / b * 1e3:.0f} GB/s)")
    print(f"difference {1e3 * (b - a):+.1f} us a call ({100 * (b / a - 1):+.1f}%)")


if __name__ == "__main__":
    main()
