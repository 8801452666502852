"""Where a judge's clock goes around GPU work it does not see, outside hiera: a parent process (the judge's part)
orders a child (the runner's part) over pipes to keep the GPU busy for D ms (`torch.cuda._sleep` between two CUDA
events, then a synchronize) and reply; the parent's clock, from the order to reading the reply, less the child's
events, is what such a protocol adds to a batch of D ms. Each D with the parent waiting for the reply blocked in
`select` and spinning on `select(0)`; the child's own stamps say how much of it is the child's wake-up, its calls
and its reply's way back. Prints a table (µs, medians of 15) and this machine's CPU idle states.
Run: python3 research/probe_reply_wakeup.py"""

import glob
import json
import os
import selectors
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import ctypes, json, sys, time, torch
libc = ctypes.CDLL(None)
torch.cuda.init(); x = torch.zeros(1, device="cuda"); x.add_(1); torch.cuda.synchronize()
khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", 0) or 1_980_000
print("ready", flush=True)
for line in sys.stdin:
    got = time.perf_counter()
    ms = float(line)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calling = time.perf_counter()
    start.record()
    if ms > 0:
        torch.cuda._sleep(int(ms * khz))
    end.record()
    torch.cuda.synchronize()
    called = time.perf_counter()
    for _ in range(30):
        libc.getpid(); sum(range(300))  # host work of the runner's export's size
    sys.stdout.write(json.dumps([start.elapsed_time(end), got, calling, called, time.perf_counter()]) + "\n")
    sys.stdout.flush()
"""


def idle_states() -> list[str]:
    rows = []
    for state in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cpuidle/state*")):
        read = lambda name: Path(state, name).read_text().strip() if Path(state, name).exists() else "?"  # noqa: E731
        rows.append(f"{read('name')} (exit {read('latency')} µs, residency {read('residency')} µs, disabled {read('disable')})")
    governor = Path("/sys/devices/system/cpu/cpuidle/current_governor_ro")
    driver = Path("/sys/devices/system/cpu/cpuidle/current_driver")
    return [f"driver {driver.read_text().strip() if driver.exists() else '?'}, governor"
            f" {governor.read_text().strip() if governor.exists() else '?'}", *rows]


def siblings(cpu: int) -> list[int]:
    text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = map(int, part.split("-"))
            out += range(a, b + 1)
        else:
            out.append(int(part))
    return out


def child_process(cpu: int | None = None) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if cpu is not None:
        os.sched_setaffinity(child.pid, {cpu})
    assert child.stdout.readline().strip() == b"ready"
    return child


def ask(child: subprocess.Popen, selector: selectors.BaseSelector, ms: float, wait: str) -> list[float]:
    """One order of `ms` of GPU work, the reply awaited by `wait` ("spin" or "block"), after the parent idled a while
    (as between batches): [the parent's clock at the order, the child's events, got, calling, called, replied, the
    parent's clock at the read]."""
    time.sleep(0.05)
    started = time.perf_counter()
    child.stdin.write(f"{ms}\n".encode())
    child.stdin.flush()
    if wait == "spin":
        while not selector.select(0):
            pass
    else:
        selector.select(60)
    line = child.stdout.readline()
    read = time.perf_counter()
    return [started, *json.loads(line), read]


def placements() -> None:
    """The child on the first allowed CPU; the parent spinning on its sibling, on another core, or blocked there."""
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[0]
    sibling = [c for c in siblings(cpu) if c != cpu and c in allowed]
    far = [c for c in allowed if c not in siblings(cpu)]
    print(f"cpus {allowed}; cpu {cpu}'s siblings {siblings(cpu)}")
    child = child_process(cpu)
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)
    print("parent on | wait | child's host work after its calls (µs) | clock − events (µs), medians of 15, D = 13 ms")
    for where, parent in (("sibling", sibling[:1]), ("other core", far[:1])):
        if not parent:
            print(f"{where}: none")
            continue
        os.sched_setaffinity(0, set(parent))
        for wait in ("spin", "block"):
            parts = []
            for _ in range(15):
                started, events, got, calling, called, replied, read = ask(child, selector, 13.0, wait)
                parts.append(((replied - called) * 1e6, (read - started) * 1e6 - events * 1e3))
            print(f"{where:10s} | {wait:5s} | {statistics.median(p[0] for p in parts):8.1f} |"
                  f" {statistics.median(p[1] for p in parts):8.1f}", flush=True)
    os.sched_setaffinity(0, set(allowed))
    child.stdin.close()
    child.wait()


def main() -> None:
    for row in idle_states():
        print("cpuidle:", row)
    child = child_process()
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)
    print("D ms | wait | clock − events | order → child has it | child's calls − events | child's reply → read")
    results = {}
    for ms in (0.0, 1.0, 13.0, 170.0):
        for wait in ("block", "spin"):
            parts = []
            for _ in range(15):
                started, events, got, calling, called, replied, read = ask(child, selector, ms, wait)
                parts.append([(read - started) * 1e3 - events, (got - started) * 1e3, (called - calling) * 1e3 - events,
                              (read - replied) * 1e3])
            med = [round(statistics.median(p[k] for p in parts) * 1e3, 1) for k in range(4)]
            results[f"{ms} {wait}"] = med
            print(f"{ms:6.1f} | {wait:5s} | {med[0]:8.1f} | {med[1]:8.1f} | {med[2]:8.1f} | {med[3]:8.1f}", flush=True)
    child.stdin.close()
    child.wait()
    print(json.dumps(results))
    placements()


if __name__ == "__main__":
    main()
