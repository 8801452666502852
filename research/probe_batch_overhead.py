"""What a batch's protocol costs per call, piece by piece, in one process on the GPU: the runner's parse of a
256-call order, its input views, CUDA events, a loop of calls, and the IPC export of each output (first time and
again); then the cuda runner's own `prepare` and `batch` (what the judge's clock holds of the runner) for null batches
and for a torch op, with the reply's serialization. Prints tables of microseconds per call.
Run: python3 research/probe_batch_overhead.py"""

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "plugins"))

import torch

from cuda import ipc
from cuda.runner import Runner, view
from hiera_judge.messages import BatchOrder, BufferView, CallOrder, Order, Reply
from hiera_core.serialization import from_dict, to_dict

N, PLACE = 256, 4 << 20


def per_call_us(fn, repeats=5):
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e6 / N)
    return statistics.median(times), min(times), max(times)


arena = torch.zeros(N * PLACE * 2, dtype=torch.uint8, device="cuda")
calls = [CallOrder(case={}, inputs={str(i): BufferView(offset_bytes=(2 * k + i) * PLACE, shape=[PLACE // 4], dtype="float32")
                                    for i in range(2)},
                   output=BufferView(offset_bytes=0, shape=[PLACE // 4], dtype="float32")) for k in range(N)]
line = json.dumps(to_dict(BatchOrder(calls=calls), Order))
rows = {}
rows["parse the order (json + cattrs)"] = per_call_us(lambda: from_dict(json.loads(line), Order))
order = from_dict(json.loads(line), Order)
rows["input views (2 a call)"] = per_call_us(lambda: [[view(arena, c.inputs[str(i)]) for i in range(2)] for c in order.calls])
rows["create 2 CUDA events"] = per_call_us(lambda: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(N)])
events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(N)]
rows["record 2 events, no call"] = per_call_us(lambda: [(a.record(), b.record()) for a, b in events])
views = [[view(arena, c.inputs[str(i)]) for i in range(2)] for c in order.calls]
rows["a + b (torch op, new output)"] = per_call_us(lambda: [v[0] + v[1] for v in views])
outs = [torch.empty(PLACE // 4, device="cuda") for _ in range(N)]
rows["export, first time"] = per_call_us(lambda: [ipc.export_all([o]) for o in outs], repeats=1)
rows["export, again"] = per_call_us(lambda: [ipc.export_all([o]) for o in outs])
rows["export_all, one batch"] = per_call_us(lambda: ipc.export_all(outs))
rows["cuMemGetAddressRange only"] = per_call_us(lambda: [ipc.allocation(o.data_ptr()) for o in outs])
rows["elapsed_time of each pair"] = per_call_us(lambda: [a.elapsed_time(b) for a, b in events])
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {N} calls, µs per call (median, min, max of 5)")
for name, (med, lo, hi) in rows.items():
    print(f"{name:34s} {med:8.2f} {lo:8.2f} {hi:8.2f}")


print("\nthe cuda runner's prepare and batch, and its reply's serialization (ms for the batch: median, min, max of 7)")
runner = Runner()
runner.inputs_arena = runner.output_arena = arena
for label, fn in (("null", None), ("a + b", lambda x, y: x + y), ("2x + b", lambda x, y: 2 * x + y)):
    for n in (1, 64, 256):
        order = BatchOrder(calls=calls[:n], null=fn is None)
        runner.fn = fn
        phases = {"prepare": [], "batch": [], "reply json": []}
        for _ in range(7):
            t0 = time.perf_counter()
            runner.prepare(order)
            t1 = time.perf_counter()
            reply = runner.batch()
            t2 = time.perf_counter()
            json.dumps(to_dict(reply, Reply))
            t3 = time.perf_counter()
            for key, (a, b) in zip(phases, ((t0, t1), (t1, t2), (t2, t3))):
                phases[key].append((b - a) * 1e3)
        print(f"{label:7s} {n:4d} calls: " + "; ".join(
            f"{key} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})" for key, v in phases.items()))
