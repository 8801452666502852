"""The judge library: how a candidate is judged without being believed.

    hiera ──JudgeRequest──► judge (sandboxed, trusted: never loads candidate code)
                              ├──Order──► runner (same sandbox, no capabilities: loads the candidate)
                              ◄──Reply──
    hiera ◄──JudgeAnswer── judge

- `judging`: the three sides' plumbing (starting a judge, the runner's pipes and cgroup, the timing rule, the
  device lock); an architecture's judge and runner (`hiera_plugins.cuda.judge`, ...) hold the semantics.
- `messages`: the records that cross those boundaries.
- `sandbox`: namespaces, cgroups, rlimits and read-only mounts around compilers, judges and runners.
- `source_rules`: what a space forbids in a candidate's source, for an architecture's `check_source`.

It knows tasks and verdicts (`hiera_core.records`) but nothing of runs: no engine, store, session or config. This
package imports nothing itself: `python -m hiera_judge.sandbox` runs where only this folder and Python's are visible.
"""
