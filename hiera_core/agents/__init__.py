"""The paper's three agent roles over any backend: prompts in, validated structured answers out.

SSDA (`Agents.select_space`) chooses the implementation space and scores the directions (Eq. 3-4);
SPA (`Agents.plan_strategy`) turns space and direction into a strategy (Eq. 5); OA writes K candidate
sources (Eq. 6), as several requests in flight at once when the backend allows it. Every request carries
the prompt a model reads and the same context as data, so a rule-based backend (`expert`) answers
through the same path as a model. The role skeletons live here; the knowledge they quote belongs to the
plugins that own it: a direction's description, the architecture plugins' knowledge, rubric and strategies
of it (the run's `RunContext.knowledge`), a space's description, a workload's contract, an architecture's
toolchain.

Every call goes through the run's answer cache (`cache/llm/<key>.json`, the key a hash of the request):
an identical request is answered from it without calling the backend (a resumed run pays nothing twice),
and `hiera run --replay` answers a whole run from another run's cache. Every call is recorded in the
trajectory as an `AgentCalled` event: tokens, money, wall time, and why an answer was unusable.

How a round searches is a search strategy (`[run] strategy`), a plugin like any other
(`hiera_register_searches`; the built-ins, HIERA's loop and the paper's two baselines, are in
`hiera_plugins.searches`): it asks these agents for the round's sources its own way.

One concern per module: `context` (what the agents are given and give back), `answers` (a model's answer
read strictly, the roles' schemas), `feedback` (what evaluating a candidate gave, as a prompt reads it),
`prompts` (the roles' prompts), `cache` (the answer cache) and `roles` (the agents asking the backend).
"""

from hiera_core.agents.answers import (
    JUDGE_SCHEMA,
    OA_SCHEMA,
    SPA_SCHEMA,
    SchemaError,
    cut_off,
    extract_json,
    ssda_schema,
    validate,
)
from hiera_core.agents.cache import ANSWER_CACHE, AnswerCache, request_key
from hiera_core.agents.context import Brief, GeneratedSource, Generation, PlanningContext
from hiera_core.agents.feedback import execution_feedback, profile_summary
from hiera_core.agents.roles import MAX_ATTEMPTS, AgentError, Agents

__all__ = [
    "ANSWER_CACHE",
    "JUDGE_SCHEMA",
    "MAX_ATTEMPTS",
    "OA_SCHEMA",
    "SPA_SCHEMA",
    "AgentError",
    "Agents",
    "AnswerCache",
    "Brief",
    "GeneratedSource",
    "Generation",
    "PlanningContext",
    "SchemaError",
    "cut_off",
    "execution_feedback",
    "extract_json",
    "profile_summary",
    "request_key",
    "ssda_schema",
    "validate",
]
