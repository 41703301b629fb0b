"""LiteLLM adapter: a circuit breaker per Router deployment, asked before every attempt.

The model call is a dependency too. Build the router through :class:`GuardedRouter`
(it takes :class:`litellm.Router`'s own arguments) and every attempt LiteLLM makes (the
first try, each retry, each fallback) asks its deployment's breaker first::

    registry = toolbreaker.Registry(store=SQLiteStore("breakers.db"))  # shared by processes
    router = GuardedRouter(
        registry=registry,
        model_list=[...],                              # LiteLLM's deployments
        fallbacks=[{"primary": ["backup"]}],           # LiteLLM's own fallback chain
    )
    router.completion(model="primary", messages=[...])  # or await router.acompletion(...)

Where it hooks. LiteLLM's router (1.109 and later) runs every attempt through its *host*:
``PythonHost.invoke(op)`` hands out the litellm function (``completion``,
``acompletion``) an attempt calls with the one deployment the routing core picked.
:class:`GuardedRouter` builds the router with ``Router.from_config(config, host=...)``
and a host whose chat endpoints admit the attempt through the deployment's breaker,
make the call, and settle the breaker with its outcome, in one frame, on the sync and
the async path alike (the async path awaits the store; nothing blocks the loop). A
``CustomLogger`` would not do: its pre-call check runs before each attempt, but its
outcome callbacks run once per request (a request's attempts share one logging object,
which logs only its first failure), so a permit could not be settled per attempt.

Failing closed. LiteLLM's own cooldowns live in one process and let a deployment back
in when the cooldown cache cannot be read. A breaker keeps its state in toolbreaker's
store (memory, SQLite, Redis, PostgreSQL): routers in several processes that share a
store share each deployment's breaker, and a store that cannot be read rejects the
attempt (reason ``store-unavailable``) instead of waving it through.

An attempt the breaker rejects is never sent. The adapter raises the rejection
(:class:`~toolbreaker.errors.CircuitOpen`, carrying ``retry_skip_deployment_id``) into
LiteLLM, whose own loop treats it as that attempt's failure: a retry picks another
deployment of the group where there is one, and the ``fallbacks`` chain moves on to the
next model group. When every attempt of a call was rejected, the caller gets
:class:`~toolbreaker.errors.DeploymentsUnavailable` (``.deployments``: each breaker and its
wait; ``.result``: what a model may read, built by
:func:`~toolbreaker.runtime._result.deployments_unavailable_result`).

What counts (the breaker's classifier, :func:`toolbreaker.classify_exception`,
on LiteLLM's exceptions): 429, 5xx, timeouts (LiteLLM's ``Timeout``) and connection
errors count against the deployment, with a ``Retry-After`` going into the core; a 400
(a bad request, a context window exceeded, a content policy) and every other 4xx never
do; a cancelled call is ignored. A streamed response counts when it opens.

Keys. Each deployment gets ``registry.get(key, "completion")``: the key is the
deployment's ``model_info.id`` when the model list names one, else its provider and
model with the host of its ``api_base`` (``openai/gpt-4o-mini@eu.example.com``), the
same in every process that reads the same model list. Pass ``key=`` to choose another.

The run budget. Given a :class:`~toolbreaker.RunGuard`, each response's ``usage``
(prompt and completion tokens, with the model that answered, see :func:`usage_of`) goes
into the guard through :func:`~toolbreaker.integrations.count_usage`
(:meth:`~toolbreaker.RunGuard.add_usage`), priced by the budget's price table, and each
answer begins a model turn (:meth:`~toolbreaker.RunGuard.mark_turn`): the tool calls it
asks for are one turn's, as ``Budget.max_calls_per_turn`` counts them.

A stopped run. Every adapter ends a run the guard stopped without asking the model
again; a LiteLLM agent's loop is the caller's own, so once the guard has stopped the run
(a loop, a budget, a required dependency, an operator) a model call raises
:class:`RunStopped` before any deployment is asked: nothing is sent, no breaker is
consulted, and the error carries the stop packet. An attempt the run's stop reaches
inside a call (a retry, a fallback) is refused the same way, also on a router built
with :class:`BreakerHost` directly.
"""

from __future__ import annotations

import contextvars
import dataclasses
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from toolbreaker._extras import require
from toolbreaker.errors import CircuitOpen, DeploymentsUnavailable, PolicyError, RunStopped
from toolbreaker.integrations import count_usage
from toolbreaker.integrations._described import check_adapter
from toolbreaker.integrations._kit import (
    Breaker,
    Permit,
    Registry,
    Rejection,
    deployments_unavailable_result,
    hook_failed,
)

require("litellm", "litellm")

# After require(), which words the missing-extra error.
from litellm.router import Router, router_arguments  # noqa: E402
from litellm.router_config import build_router_config  # noqa: E402
from litellm.router_python_host import PythonHost  # noqa: E402

if TYPE_CHECKING:
    from toolbreaker.integrations._kit import (
        RunGuard,
    )


__all__ = [
    "GuardedRouter",
]

#: The operation class of every deployment's breaker.
OPERATION: Final = "completion"

#: Maps an attempt's keyword arguments (the deployment's ``litellm_params`` with its
#: ``model_info``) to the dependency name of its breaker.
KeyFunction = Callable[[Mapping[str, Any]], str]

# The host endpoints an attempt of a chat completion calls.
_SYNC: Final = "completion"
_ASYNC: Final = "acompletion"


def deployment_key(params: Mapping[str, Any], *, named: frozenset[str] = frozenset()) -> str:
    """The default breaker key of the deployment an attempt goes to.

    ``model_info.id`` when it is one of ``named`` (the ids the model list gave), else the
    deployment's model (``openai/gpt-4o-mini``) and, when it has an ``api_base``, that
    base's host and port after an ``@``. Credentials never take part.
    """
    info = params.get("model_info")
    given = info.get("id") if isinstance(info, Mapping) else None
    if isinstance(given, str) and given in named:
        return given
    model = str(params.get("model") or "unknown-model")
    base = params.get("api_base")
    if isinstance(base, str) and base:
        where = urllib.parse.urlsplit(base)
        try:
            port = where.port
        except ValueError:  # a port that is no number: the host alone
            port = None
        if where.hostname:
            return f"{model}@{where.hostname}:{port}" if port else f"{model}@{where.hostname}"
    return model


def usage_of(response: object, requested: str = "") -> tuple[str, int, int] | None:
    """``(model, input tokens, output tokens)`` of a response's ``usage``, or ``None``.

    The model is the one the provider says answered (``response.model``), else
    ``requested``; the tokens are ``usage.prompt_tokens`` and ``usage.completion_tokens``.
    A response without a usage (a stream that has only opened) gives ``None``.
    """
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    if not isinstance(prompt, int) and not isinstance(completion, int):
        return None
    answered = getattr(response, "model", None)
    model = answered if isinstance(answered, str) and answered else requested
    return (
        model,
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


@dataclasses.dataclass(slots=True)
class _Call:
    """One caller's model call: what its attempts met, and whether one was sent.

    ``rejections``: the breakers' rejections; ``stopped``: the refusal of a run the guard
    stopped (the run is over, whatever else the call met).
    """

    rejections: list[CircuitOpen] = dataclasses.field(default_factory=list)
    sent: bool = False
    stopped: RunStopped | None = None


# The model call in progress in this context; the router's attempts run inside it.
_CALL: Final[contextvars.ContextVar[_Call | None]] = contextvars.ContextVar(
    "toolbreaker_litellm_call", default=None
)


class _Guarding:
    """What the sync and async endpoints share: the breaker, the rejection, the usage."""

    def __init__(self, registry: Registry, key: KeyFunction, guard: RunGuard | None) -> None:
        self.registry = registry
        self.key = key
        self.guard = guard

    # The refusal is raised where it is made: bound to a local of the raising frame, it
    # would hold that frame (and the router) in a cycle through its own traceback.
    def refuse_if_stopped(self) -> None:
        """Raise :class:`RunStopped` once the guard has stopped the run."""
        guard = self.guard
        if guard is not None and guard.stopped is not None:
            raise self._noted(RunStopped(guard.stop_packet(), guard.turn_outcome()))

    async def arefuse_if_stopped(self) -> None:
        """:meth:`refuse_if_stopped` for the event loop: a shared journal is read off it."""
        guard = self.guard
        if guard is not None and guard.stopped is not None:
            packet = await guard.astop_packet()
            raise self._noted(RunStopped(packet, guard.turn_outcome()))

    @staticmethod
    def _noted(error: RunStopped) -> RunStopped:
        call = _CALL.get()
        if call is not None:
            call.stopped = error
        return error

    def breaker_for(self, params: Mapping[str, Any]) -> Breaker:
        """The breaker of the deployment ``params`` go to (created on first use)."""
        return self.registry.get(self.key(params), OPERATION)

    def rejected(self, params: Mapping[str, Any], rejection: Rejection) -> CircuitOpen:
        """The error that turns the attempt away; noted for the caller's call."""
        error = rejection.error()
        info = params.get("model_info")
        deployment = info.get("id") if isinstance(info, Mapping) else None
        if isinstance(deployment, str):
            # LiteLLM reads this off an attempt's error: a retry skips the deployment.
            error.retry_skip_deployment_id = deployment  # type: ignore[attr-defined]
        call = _CALL.get()
        if call is not None:
            call.rejections.append(error)
        return error

    def admitted(self) -> None:
        call = _CALL.get()
        if call is not None:
            call.sent = True

    def answered(self, params: Mapping[str, Any], response: object) -> None:
        """Begin a model turn and count the response's usage into the run guard.

        The answer begins the turn: the tool calls it asks for are that turn's calls
        (``Budget.max_calls_per_turn``; a call deferred past the limit runs after the next
        answer). A fault in either changes nothing: the answer stands.
        """
        if self.guard is None:
            return
        try:
            self.guard.mark_turn()
        except Exception as exc:  # noqa: BLE001 - the model's answer stands
            hook_failed("beginning a model turn failed; the LiteLLM response stands", exc)
        try:
            usage = usage_of(response, str(params.get("model") or ""))
        except Exception as exc:  # noqa: BLE001 - the model's answer stands
            hook_failed("reading a LiteLLM response's usage failed; the response stands", exc)
            return
        if usage is not None:
            count_usage(self.guard, *usage)


class BreakerHost(PythonHost):
    """LiteLLM's Python host, with every chat completion attempt behind its breaker.

    ``invoke("completion")`` and ``invoke("acompletion")`` return the litellm function
    wrapped: admit through the deployment's breaker, call, settle with the outcome. An
    attempt of a run the guard stopped raises :class:`RunStopped` first.
    Every other endpoint is LiteLLM's own. :class:`GuardedRouter` builds one; pass one to
    ``Router.from_config(config, host=...)`` to build the router yourself.
    """

    __slots__ = ("_guarding",)

    def __init__(
        self,
        registry: Registry,
        *,
        key: KeyFunction = deployment_key,
        guard: RunGuard | None = None,
    ) -> None:
        check_adapter(guard=guard, functions={"key": key})
        if not isinstance(registry, Registry):
            raise PolicyError("BreakerHost needs a Registry", field="registry")
        self._guarding = _Guarding(registry, key, guard)

    def invoke(self, op: str) -> Callable[..., Any]:
        """The litellm endpoint ``op``; the chat completion ones guarded."""
        endpoint = super().invoke(op)
        if op == _SYNC:
            return self._sync(endpoint)
        if op == _ASYNC:
            return self._async(endpoint)
        return endpoint

    def _sync(self, endpoint: Callable[..., Any]) -> Callable[..., Any]:
        guarding = self._guarding

        def completion(*args: Any, **params: Any) -> Any:
            guarding.refuse_if_stopped()
            admission = guarding.breaker_for(params).allow()
            if not isinstance(admission, Permit):
                raise guarding.rejected(params, admission)
            guarding.admitted()
            try:
                response = endpoint(*args, **params)
            except BaseException as exc:
                admission.record(exc)
                raise
            admission.record("success")
            guarding.answered(params, response)
            return response

        return completion

    def _async(self, endpoint: Callable[..., Any]) -> Callable[..., Any]:
        guarding = self._guarding

        async def acompletion(*args: Any, **params: Any) -> Any:
            await guarding.arefuse_if_stopped()
            # The store round trips are awaited: a shared store never blocks the loop.
            admission = await guarding.breaker_for(params).aadmit()
            if not isinstance(admission, Permit):
                raise guarding.rejected(params, admission)
            guarding.admitted()
            try:
                response = await endpoint(*args, **params)
            except BaseException as exc:
                await admission.arecord(exc)
                raise
            await admission.arecord("success")
            guarding.answered(params, response)
            return response

        return acompletion


def _named_ids(model_list: object) -> frozenset[str]:
    """The ``model_info.id`` values a model list gives its deployments."""
    found: set[str] = set()
    if isinstance(model_list, Sequence):
        for entry in model_list:
            info = entry.get("model_info") if isinstance(entry, Mapping) else None
            given = info.get("id") if isinstance(info, Mapping) else None
            if isinstance(given, str) and given:
                found.add(given)
    return frozenset(found)


def _unavailable(model: str, call: _Call) -> DeploymentsUnavailable | None:
    """The error for a call none of whose attempts was sent, or ``None``."""
    if call.sent or not call.rejections:
        return None
    rejections = tuple(call.rejections)

    def render(reason: str, retry_after_ms: int | None, tool: str | None = None) -> dict[str, Any]:
        return deployments_unavailable_result(tool or model, [r.result for r in rejections])

    return DeploymentsUnavailable(model, rejections, render)


class GuardedRouter:
    """A :class:`litellm.Router` whose every deployment attempt asks its breaker first.

    Every other attribute is the router's own (``registry()``, ``settings()``,
    ``embedding``, ``apply`` ...); only chat completions are guarded. The breakers are
    :attr:`breakers` (the registry passed in).

    Args:
        registry: where the deployments' breakers live; give routers in several
            processes one shared store (SQLite, Redis, PostgreSQL) to share them. A
            private :class:`~toolbreaker.Registry` when omitted.
        guard: the run guard each response's usage is counted into (each answer begins
            one of its model turns), if any; once it has stopped the run, model calls
            raise :class:`RunStopped` and nothing is sent.
        key: maps an attempt to its breaker's dependency name (default
            :func:`deployment_key`, knowing the ids the model list names).
        **arguments: :class:`litellm.Router`'s own arguments (``model_list``,
            ``fallbacks``, ``num_retries`` ...).
    """

    def __init__(
        self,
        *,
        registry: Registry | None = None,
        guard: RunGuard | None = None,
        key: KeyFunction | None = None,
        **arguments: Any,
    ) -> None:
        check_adapter(registry=registry, guard=guard, hooks={"key": key})
        self.breakers = registry if registry is not None else Registry()
        models = arguments.get("model_list")
        named = _named_ids(models)
        chosen: KeyFunction = key or (lambda params: deployment_key(params, named=named))
        self.host = BreakerHost(self.breakers, key=chosen, guard=guard)
        self.router: Router = Router.from_config(
            build_router_config(router_arguments(**arguments)), host=self.host
        )
        # With a boundary sheet, each deployment's breaker now, by the registry's one rule:
        # a deployment the sheet describes another way is refused here, not at the first
        # completion (without one there is nothing to refuse, and keys are asked lazily).
        if self.breakers.from_sheet and isinstance(models, list):
            for deployment in models:
                if isinstance(deployment, Mapping):
                    self.breaker_for(deployment)

    def breaker_for(self, deployment: Mapping[str, Any]) -> Breaker:
        """The breaker of a deployment: a model-list entry, or its ``litellm_params``."""
        params = deployment.get("litellm_params", deployment)
        if not isinstance(params, Mapping):
            params = deployment
        info = deployment.get("model_info", params.get("model_info"))
        return self.host._guarding.breaker_for({**params, "model_info": info or {}})

    def completion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        """:meth:`litellm.Router.completion`, every attempt behind its breaker.

        Raises:
            RunStopped: the run guard has stopped the run; nothing was sent.
            DeploymentsUnavailable: every attempt was rejected locally; nothing was sent.
        """
        self.host._guarding.refuse_if_stopped()
        call = _Call()
        token = _CALL.set(call)
        try:
            return self.router.completion(model=model, messages=messages, **kwargs)
        except Exception as exc:
            if call.stopped is not None:  # an attempt met the run's stop: the run is over
                if call.stopped is exc:
                    raise
                raise call.stopped from exc
            error = _unavailable(model, call)
            if error is None:
                raise
            raise error from exc
        finally:
            _CALL.reset(token)

    async def acompletion(self, model: str, messages: list[Any], **kwargs: Any) -> Any:
        """:meth:`litellm.Router.acompletion`, every attempt behind its breaker.

        Raises:
            RunStopped: the run guard has stopped the run; nothing was sent.
            DeploymentsUnavailable: every attempt was rejected locally; nothing was sent.
        """
        await self.host._guarding.arefuse_if_stopped()
        call = _Call()
        token = _CALL.set(call)
        try:
            return await self.router.acompletion(model=model, messages=messages, **kwargs)
        except Exception as exc:
            if call.stopped is not None:  # an attempt met the run's stop: the run is over
                if call.stopped is exc:
                    raise
                raise call.stopped from exc
            error = _unavailable(model, call)
            if error is None:
                raise
            raise error from exc
        finally:
            _CALL.reset(token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router, name)
