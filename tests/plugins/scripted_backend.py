"""A test backend that answers with scripted sources: broken, hostile and correct candidates."""

import json
from typing import ClassVar

from hiera_core import AgentAnswer, hookimpl
from hiera_core.records import SourceLabel

HEADER = "int hiera_stencil2d(int n, int radius, int steps, const double *w, const double *in, double *out, double *scratch)"

SOURCES = {
    "segfault": HEADER + "{ volatile int *p = 0; *p = 1; return 0; }",
    "hang": HEADER + "{ volatile int spin = 1; while (spin) {} return 0; }",
    "wrong": HEADER + "{ for (long i = 0; i < (long)n * n; i++) out[i] = 0.0; return 0; }",
    "syntax": HEADER + "{ this is not C }",
    "openmp": "#include <omp.h>\n" + HEADER + "{\n#pragma omp parallel for\n for (int i = 0; i < n; i++) {} return 1; }",
    "writes-input": HEADER + "{ ((double *)in)[0] += 1.0; for (long i = 0; i < (long)n * n; i++) out[i] = 0.0; return 0; }",
}


class ScriptedBackend:
    name: ClassVar[str] = "scripted"
    config_class: ClassVar[type | None] = None

    def __init__(self, config, context):
        self.context = context

    def answer(self, request):
        if request.role == "ssda":
            data = {"space": "pure_cuda", "scores": {"C": 0.9, "P": 0.1, "M": 0.1, "R": 0.1, "T": 0.1}, "rationale": "scripted"}
        elif request.role == "spa":
            data = {"name": "scripted-hazards", "steps": ["try the hazards"], "constraints": []}
        else:
            data = {"candidates": [{"source": s} for s in SOURCES.values()]}
            return AgentAnswer(text=json.dumps(data), labels=[SourceLabel(origin=name) for name in SOURCES])
        return AgentAnswer(text=json.dumps(data))


@hookimpl
def hiera_register_backends():
    return [ScriptedBackend]
