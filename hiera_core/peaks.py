"""A machine's peaks (memory GB/s, GFLOP/s), remembered across runs.

A run measures its machine's peaks once, at its start, to set the roofline floors a candidate cannot beat. One
measurement taken while other work shares the machine reads low (the host's copy bandwidth varied 17-26 GB/s
under load on the 2-core machine), and floors from it reject honest candidates as faster than physics. So every
measurement is kept, per architecture, hardware and dtype, in `~/.cache/hiera/peaks.json` (the last `KEPT`), and
the floors use the largest, or once `TRUSTED` were seen the second largest: a busy moment cannot lower them, and
one reading too high for the machine cannot raise them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from pathlib import Path
from typing import Any

from hiera_core.store import write_text_atomic

PEAKS_FILE = Path("~/.cache/hiera/peaks.json")
KEPT = 20
TRUSTED = 5


def remembered(
    arch: str, hardware: dict[str, Any], dtype: str, measured: tuple[float, float], path: Path = PEAKS_FILE
) -> tuple[tuple[float, float], int]:
    """Record `measured` (GB/s, GFLOP/s) for this machine; return the peaks the floors use and how many
    measurements they come from."""
    path = path.expanduser()
    key = hashlib.sha256(json.dumps({"arch": arch, "hardware": hardware, "dtype": dtype}, sort_keys=True).encode()).hexdigest()[
        :16
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            table = json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, ValueError):
            table = {}  # an unreadable file: start again
        seen = [pair for pair in table.get(key, {}).get("measured", []) if len(pair) == 2][-(KEPT - 1) :]
        reading = [round(measured[0], 3), round(measured[1], 3)]
        if not seen or seen[-1] != reading:  # the same reading again is a process's cached one, not a new measurement
            seen.append(reading)
        table[key] = {"arch": arch, "dtype": dtype, "model": hardware.get("model", ""), "measured": seen}
        write_text_atomic(path, json.dumps(table, indent=1, sort_keys=True))
    return (_upper(sorted(g for g, _ in seen)), _upper(sorted(f for _, f in seen))), len(seen)


def _upper(ordered: list[float]) -> float:
    return ordered[-1] if len(ordered) < TRUSTED else ordered[-2]
