"""The Step: a frozen value, and the one home of the arguments' idempotency handling.

``Step.args_for`` is what every adapter sends a tool: the model's key argument dropped,
a write's key given where the tool's parameters take it. A table of steps by what the
tool takes, then the same through a real run guard.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from toolbreaker import RunGuard
from toolbreaker.errors import PermitError
from toolbreaker.runtime._step import Step


class _Owner:
    """Settles nothing but says it was asked (a unit test of the step alone)."""

    def __init__(self) -> None:
        self.told: list[tuple[str, Any]] = []

    def _step_succeeded(self, step: Step, result: Any) -> Any:
        self.told.append(("succeeded", result))
        return result

    def _step_failed(self, step: Step, exc: BaseException) -> Any:
        self.told.append(("failed", exc))
        return {"ok": False}

    async def _step_asucceeded(self, step: Step, result: Any) -> Any:
        return self._step_succeeded(step, result)

    async def _step_afailed(self, step: Step, exc: BaseException) -> Any:
        return self._step_failed(step, exc)


GUARDS = {"title": "Printer", "idempotency_key": "k-guard"}


def _write(key: str | None = "k-guard") -> Step:
    args = {"title": "Printer", **({"idempotency_key": key} if key else {})}
    return Step(_Owner(), "create_ticket", args, idempotency_key=key, key_arg="idempotency_key")


@pytest.mark.parametrize(
    ("step", "params", "args", "sent"),
    [
        # a write's key goes where the tool takes it (None: it takes it) ...
        (_write(), None, None, GUARDS),
        (_write(), ("title", "idempotency_key"), None, GUARDS),
        # ... and nowhere else: a tool that reads idempotency_key() is not sent it
        (_write(), ("title",), None, {"title": "Printer"}),
        (_write(), (), None, {"title": "Printer"}),
        # a key the model made up never reaches the tool, whatever it takes
        (_write(), None, {"title": "Printer", "idempotency_key": "k-model"}, GUARDS),
        (_write(), (), {"title": "Printer", "idempotency_key": "k-model"}, {"title": "Printer"}),
        # a call of a write tool that is a read this time has no key to give
        (
            _write(None),
            None,
            {"title": "Printer", "idempotency_key": "k-model"},
            {"title": "Printer"},
        ),
        # a step without a key argument (a breaker's, a read's) sends what it is given
        (
            Step(_Owner(), "search", {"q": "usb", "idempotency_key": "x"}),
            (),
            None,
            {"q": "usb", "idempotency_key": "x"},
        ),
    ],
)
def test_args_for_gives_the_key_as_the_tools_parameters_require(step, params, args, sent):
    before = dict(step.args)
    assert step.args_for(params, args) == sent
    assert step.args == before  # a copy: the step's own arguments never change


def test_a_step_is_frozen():
    step = _write()
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.answer = {"ok": True}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.args = {}  # type: ignore[misc]


def test_a_steps_own_init_takes_exactly_its_fields():
    # Step sets its fields as one dict (one is built per call): its hand-written
    # __init__ must take every field the dataclass declares, in order, with its default
    # and its kind (the owner, tool and args positional, the rest by keyword).
    params = list(inspect.signature(Step.__init__).parameters.values())[1:]
    fields = [f for f in dataclasses.fields(Step) if f.init]
    assert [p.name for p in params] == [f.name for f in fields]
    for param, field in zip(params, fields, strict=True):
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        assert param.default == default, field.name
        kind = (
            inspect.Parameter.KEYWORD_ONLY
            if field.kw_only
            else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        assert param.kind == kind, field.name
    step = _write()
    assert dataclasses.replace(step).args == step.args
    assert {f.name for f in dataclasses.fields(Step)} == set(vars(step))


def test_a_step_settles_once_and_records_why_it_did_not_succeed():
    owner = _Owner()
    step = Step(owner, "create_ticket", {"title": "Printer"})
    assert not step.settled
    step.failed_as("unverified")
    assert step.succeeded({"id": "T-1"}) == {"id": "T-1"}
    assert (step.settled, step.failure) == (True, "unverified")
    with pytest.raises(PermitError):
        step.failed(RuntimeError("again"))
    assert owner.told == [("succeeded", {"id": "T-1"})]


def test_a_step_with_an_answer_is_settled_from_the_start():
    step = Step(_Owner(), "create_ticket", {}, answer={"ok": False}, refused=True)
    assert step.settled
    with pytest.raises(PermitError):
        step.succeeded(None)


def test_a_run_guard_step_drops_the_models_key_and_gives_its_own():
    guard = RunGuard("task-args-for")
    seen: list[dict[str, Any]] = []

    @guard.tool(risk="reversible_write")
    def create_ticket(title: str, idempotency_key: str = "") -> dict[str, Any]:
        seen.append({"title": title, "idempotency_key": idempotency_key})
        return {"id": "T-1"}

    step = guard.begin("create_ticket", {"title": "Printer", "idempotency_key": "k-model"})
    key = step.idempotency_key
    assert key is not None
    assert key != "k-model"
    assert step.key_arg == "idempotency_key"
    assert step.args == {"title": "Printer", "idempotency_key": key}
    assert step.args_for(("title",)) == {"title": "Printer"}
    assert step.args_for(args={"title": "Printer", "idempotency_key": "k-model"}) == step.args
    step.succeeded({"id": "T-1"})
    # The same action from the model with another made-up key is the same write.
    again = guard.begin("create_ticket", {"title": "Printer", "idempotency_key": "k-other"})
    assert again.idempotency_key == key
    assert again.answer == {"id": "T-1"}
