"""Before a KernelBench experiment's folder is committed: KernelBench's own task code, which every prompt quotes as the
frozen `groundtruth.py`, is replaced by a line naming it, in the exchange's prompt files and in the runs' answer
caches (their `prompt` field). The task files stay in the user's checkout; a resumed run finds its answers by the
cache file's name, and `--backend replay` by the request's place where its prompt differs, so both still work.

    python research/redact_kernelbench.py docs/results/kernelbench-model-2026-12-05
"""

import json
import re
import sys
from pathlib import Path

GROUNDTRUTH = re.compile(r"(## Frozen file `groundtruth\.py`\n)```python\n.*?\n```", re.DOTALL)
PLACEHOLDER = r"\1```python\n# KernelBench's task file, from the user's checkout (not committed)\n```"


def redact(text: str) -> str:
    return GROUNDTRUTH.sub(PLACEHOLDER, text)


def main(folder: Path) -> None:
    changed = 0
    for path in folder.rglob("*.prompt.md"):
        text = path.read_text()
        if redact(text) != text:
            path.write_text(redact(text))
            changed += 1
    for path in folder.rglob("cache/llm/*.json"):
        recorded = json.loads(path.read_text())
        if redact(recorded["prompt"]) != recorded["prompt"]:
            recorded["prompt"] = redact(recorded["prompt"])
            path.write_text(json.dumps(recorded, indent=1, sort_keys=True))
            changed += 1
    print(f"{changed} file(s) redacted under {folder}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
