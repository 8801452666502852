"""Feedback a model can act on: a crash names the call it died in, its signal and what its process last
wrote to stderr; a compile error quotes the source lines its log cites; and when a round continues the
strategy whose candidate failed, one of its K requests shows that candidate and its failure and asks for a fix."""

import pytest

from hiera_core import records, serialization
from hiera_core.agents import execution_feedback
from hiera_core.config import load_config
from hiera_core.engine import evaluate_source
from hiera_core.plugins import make_plugin_manager
from hiera_core.session import Session
from hiera_workloads.stencil2d.host import HostStencilTemplate

TEMPLATE = HostStencilTemplate()
HONEST = TEMPLATE.render(TEMPLATE.defaults())


def crashing_on(n: int, source: str = HONEST) -> str:
    """`source` that says so on stderr and writes through a null pointer when called on an n x n grid."""
    return source.replace("int hiera_stencil2d(", "static int stencil_impl(", 1) + (
        "\n#include <stdio.h>\n"
        "int hiera_stencil2d(int n, int radius, int steps, const double *w, const double *in, double *out, double *scratch)\n"
        "{\n"
        f"    if (n == {n}) {{\n"
        '        fprintf(stderr, "\\x1b[31mabout to write row %d\\x1b[0m\\n", n);\n'
        "        volatile double *nowhere = 0;\n"
        "        nowhere[n] = 1.0;\n"
        "    }\n"
        "    return stencil_impl(n, radius, steps, w, in, out, scratch);\n"
        "}\n"
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("feedback")
    config = load_config(root, environ={}, cli={"arch": "host"}, overrides=[
        "workload.stencil2d.host_n=48", "evaluator.host-run.call_timeout_s=10", "evaluator.host-run.min_time_s=0.05",
    ])
    return Session.create(config, make_plugin_manager()), root


def test_a_crash_names_its_call_its_signal_and_the_end_of_its_stderr(session):
    session, root = session
    _, crashed = evaluate_source(session, crashing_on(37), space="pure_cuda", workdir=root / "crash")
    assert isinstance(crashed, records.Crashed), crashed
    # the task grid (48) passes with the first seed; the odd grid (37) is next, with seed 1 and uniform values
    assert crashed.case == "odd (n=37), seed 1, uniform inputs"
    assert crashed.signal == "SIGSEGV" and "SIGSEGV" in crashed.reason
    assert crashed.stderr_tail == "about to write row 37"  # the colour escapes are gone
    feedback = execution_feedback(crashed)
    assert "The call it crashed in: odd (n=37), seed 1, uniform inputs" in feedback
    assert "```\nabout to write row 37\n```" in feedback


def test_a_compile_error_quotes_the_lines_its_log_cites(session):
    session, root = session
    lines = HONEST.splitlines()
    broken = next(i for i, line in enumerate(lines) if line.rstrip().endswith(";") and "for" not in line)
    source = "\n".join([*lines[:broken], lines[broken].rstrip()[:-1], *lines[broken + 1:]]) + "\n"
    candidate, failed = evaluate_source(session, source, space="pure_cuda", workdir=root / "compile", device=False)
    assert isinstance(failed, records.CompileFailed), failed
    feedback = execution_feedback(failed, candidate.source, "host_source.c")
    assert f"host_source.c:{broken + 2}:" in feedback or f"host_source.c:{broken + 1}:" in feedback
    assert "/host_source.c" not in feedback  # the build directory is not the model's business
    assert "The lines of `host_source.c` it cites:" in feedback
    assert f"{broken + 1:5d} | {lines[broken].rstrip()[:-1]}" in feedback


def test_a_crash_recorded_before_these_fields_still_loads():
    line = ('{"candidate": {"id": "c", "source": "", "space": "pure_cuda", "round": 1}, "evaluation": {"kind": "crashed",'
            ' "reason": "killed by SIGSEGV"}, "kind": "candidate_evaluated", "schema_version": %d, "wall_s": 1.0}'
            % records.SCHEMA_VERSION)
    evaluation = serialization.event_from_line(line).evaluation
    assert evaluation == records.Crashed(reason="killed by SIGSEGV")
    assert execution_feedback(evaluation) == "crashed: killed by SIGSEGV"
