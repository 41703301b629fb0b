"""toolbreaker: circuit breakers around the tools an AI agent calls.

The public surface is re-exported here; everything else is private. The exceptions
live in :mod:`toolbreaker.errors` (the one tree) and the stores in
:mod:`toolbreaker.stores`; this module holds what you build and call. Each name is
imported from its home when first used (PEP 562): ``import toolbreaker`` loads this
module alone, and ``from toolbreaker import Registry`` what a registry needs, no run
guard, no SQLite, no adapter.
"""

from toolbreaker._lazy import exports as _exports

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from toolbreaker.core._breaker.policy import Policy
    from toolbreaker.core._breaker.state import Transition
    from toolbreaker.core._retry import RetryPolicy
    from toolbreaker.core._run.budget import Budget, ClassLimits, ModelPrice
    from toolbreaker.core._run.costs import token_cost
    from toolbreaker.core._run.shell import shell_risk, shell_risk_of
    from toolbreaker.runtime._breaker._boundary import Boundary
    from toolbreaker.runtime._breaker._breaker import Breaker
    from toolbreaker.runtime._breaker._classify import Verdict, classify_exception
    from toolbreaker.runtime._breaker._scope import scope
    from toolbreaker.runtime._fleet._drain import drain, prune_done
    from toolbreaker.runtime._fleet._recorder import TraceRecorder
    from toolbreaker.runtime._fleet._registry import Registry, publish_policy
    from toolbreaker.runtime._result import system_prompt_line
    from toolbreaker.runtime._run._guard import RunGuard
    from toolbreaker.runtime._run._siblings import SiblingOutcome, Siblings
    from toolbreaker.runtime._run._tools import GuardedTool
    from toolbreaker.runtime._step import idempotency_key

#: Where each re-exported name lives, imported when first used (PEP 562); the imports
#: above are the same list, for type checkers and editors.
_HOMES: dict[str, tuple[str, ...]] = {
    "toolbreaker.core._breaker.policy": ("Policy",),
    "toolbreaker.core._breaker.state": ("Transition",),
    "toolbreaker.core._retry": ("RetryPolicy",),
    "toolbreaker.core._run.budget": ("Budget", "ClassLimits", "ModelPrice"),
    "toolbreaker.core._run.costs": ("token_cost",),
    "toolbreaker.core._run.shell": ("shell_risk", "shell_risk_of"),
    "toolbreaker.runtime._breaker._boundary": ("Boundary",),
    "toolbreaker.runtime._breaker._breaker": ("Breaker",),
    "toolbreaker.runtime._breaker._classify": ("Verdict", "classify_exception"),
    "toolbreaker.runtime._breaker._scope": ("scope",),
    "toolbreaker.runtime._fleet._drain": ("drain", "prune_done"),
    "toolbreaker.runtime._fleet._recorder": ("TraceRecorder",),
    "toolbreaker.runtime._fleet._registry": ("Registry", "publish_policy"),
    "toolbreaker.runtime._result": ("system_prompt_line",),
    "toolbreaker.runtime._run._guard": ("RunGuard",),
    "toolbreaker.runtime._run._siblings": ("SiblingOutcome", "Siblings"),
    "toolbreaker.runtime._run._tools": ("GuardedTool",),
    "toolbreaker.runtime._step": ("idempotency_key",),
}

if not TYPE_CHECKING:  # invisible to mypy, which would otherwise accept any name
    __getattr__, __dir__ = _exports(__name__, _HOMES)
del TYPE_CHECKING

__version__ = "0.1.0.dev0"
"""The release of toolbreaker this is."""

__all__ = [
    "Boundary",
    "Breaker",
    "Budget",
    "ClassLimits",
    "GuardedTool",
    "ModelPrice",
    "Policy",
    "Registry",
    "RetryPolicy",
    "RunGuard",
    "SiblingOutcome",
    "Siblings",
    "TraceRecorder",
    "Transition",
    "Verdict",
    "__version__",
    "classify_exception",
    "drain",
    "idempotency_key",
    "prune_done",
    "publish_policy",
    "scope",
    "shell_risk",
    "shell_risk_of",
    "system_prompt_line",
    "token_cost",
]
