"""Every adapter checks its options the same way, when it is built.

A wrong type (a sheet path where a registry belongs, ``"yes"`` for a flag, a string where
a function belongs, a risk class with a typo) is a :class:`~toolbreaker.errors.PolicyError`
naming the option at construction: never a silent default, never an error at the first
tool call that reaches the model. One helper (``integrations/_described.check_adapter``)
does it for all of them.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

import pytest

from toolbreaker import Registry, RunGuard
from toolbreaker.errors import PolicyError


def _langchain(**options: Any) -> Any:
    from toolbreaker.integrations.langchain import ToolbreakerMiddleware

    return ToolbreakerMiddleware(**options)


def _openai(**options: Any) -> Any:
    from agents import Agent

    from toolbreaker.integrations.openai_agents import protect

    return protect(Agent(name="shop"), **{"guard": RunGuard("t"), **options})


def _pydantic(**options: Any) -> Any:
    from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability

    return ToolbreakerCapability(RunGuard("t"), **options)


def _adk(**options: Any) -> Any:
    from toolbreaker.integrations.google_adk import ToolbreakerPlugin

    return ToolbreakerPlugin(RunGuard("t"), **options)


def _crewai(**options: Any) -> Any:
    from toolbreaker.integrations.crewai import protect

    return protect([], **{"guard": RunGuard("t"), **options})


def _llama(**options: Any) -> Any:
    from toolbreaker.integrations.llama_index import protect

    # The options are checked before the workflow is looked at.
    return protect(None, **{"guard": RunGuard("t"), **options})  # type: ignore[type-var]


def _mcp(**options: Any) -> Any:
    from toolbreaker.integrations.mcp import GuardedClient

    return GuardedClient(None, **{"server": "catalog", **options})  # type: ignore[arg-type]


def _httpx(**options: Any) -> Any:
    from toolbreaker.integrations.httpx import BreakerTransport

    return BreakerTransport(**options)


def _litellm(**options: Any) -> Any:
    from toolbreaker.integrations.litellm import GuardedRouter

    return GuardedRouter(**{"model_list": [], **options})


ADAPTERS: dict[str, tuple[str, Callable[..., Any]]] = {
    "langchain": ("langchain.agents", _langchain),
    "openai_agents": ("agents", _openai),
    "pydantic_ai": ("pydantic_ai", _pydantic),
    "google_adk": ("google.adk", _adk),
    "crewai": ("crewai", _crewai),
    "llama_index": ("llama_index.core", _llama),
    "mcp": ("mcp", _mcp),
    "httpx": ("httpx", _httpx),
    "litellm": ("litellm", _litellm),
}

CASES = [
    # every adapter: a sheet's path where the registry belongs
    *[(name, {"registry": "breakers.toml"}, "registry") for name in ADAPTERS],
    ("langchain", {"hide_open_tools": "yes"}, "hide_open_tools"),
    ("langchain", {"instructions": 1}, "instructions"),
    ("langchain", {"task_id": "order-1"}, "task_id"),
    ("langchain", {"guard_factory": "guards"}, "guard_factory"),
    ("openai_agents", {"breakers": {"search": "search"}}, "breakers.search"),
    ("openai_agents", {"hide_open_tools": "yes"}, "hide_open_tools"),
    ("pydantic_ai", {"hide_open_tools": "yes"}, "hide_open_tools"),
    ("pydantic_ai", {"instructions": None}, "instructions"),
    ("google_adk", {"instructions": "yes"}, "instructions"),
    ("llama_index", {"breakers": {"search": 3}}, "breakers.search"),
    ("llama_index", {"instructions": "no"}, "instructions"),
    ("mcp", {"timeout": -1}, "timeout"),
    ("mcp", {"timeout": "4s"}, "timeout"),
    ("mcp", {"task_timeout": 0}, "task_timeout"),
    ("mcp", {"risk": {"delete_all": "wirte"}}, "risk.delete_all"),
    ("mcp", {"default_risk": "safe"}, "default_risk"),
    ("mcp", {"authorize": "admin"}, "authorize"),
    ("mcp", {"key": "catalog"}, "key"),
    ("mcp", {"classify_result": "result_error"}, "classify_result"),
    ("mcp", {"fallbacks": {"search": 3}}, "fallbacks.search"),
    ("mcp", {"fallbacks": "search_snapshot"}, "fallbacks"),
    ("mcp", {"hide_open_tools": "yes"}, "hide_open_tools"),
    ("mcp", {"server_breaker": "no"}, "server_breaker"),
    ("mcp", {"meta_key": ""}, "meta_key"),
    ("mcp", {"guard": "run-1"}, "guard"),
    ("httpx", {"key": "api.example.com"}, "key"),
    ("httpx", {"classify": None}, "classify"),
    ("litellm", {"key": "deployment"}, "key"),
    ("litellm", {"guard": "run-1"}, "guard"),
]


# LiteLLM's own types warn while pydantic builds their schemas (as in test_litellm.py).
LITELLM_WARNS = pytest.mark.filterwarnings(
    "ignore:Items? .* using the `ReadOnly` qualifier:UserWarning"
)


@LITELLM_WARNS
@pytest.mark.parametrize(("adapter", "options", "field"), CASES)
def test_a_wrong_option_fails_when_the_adapter_is_built(adapter, options, field):
    module, build = ADAPTERS[adapter]
    with warnings.catch_warnings():  # some frameworks warn as they import (crewai)
        warnings.simplefilter("ignore")
        pytest.importorskip(module, reason=f"the {adapter} extra is not installed")
        importlib.import_module(f"toolbreaker.integrations.{adapter}")
    with pytest.raises(PolicyError) as info:
        build(**options)
    assert info.value.field == field


@LITELLM_WARNS
def test_a_litellm_deployment_the_sheet_names_another_way_fails_when_the_router_is_built():
    """The router resolves each deployment of its model list when it is built: a sheet that
    describes the deployment under another operation is refused then, naming the row,
    not at the first completion."""
    pytest.importorskip("litellm", reason="the litellm extra is not installed")
    from toolbreaker.integrations.litellm import GuardedRouter

    registry = Registry.from_dict(
        {"defaults": {"timeout_ms": 30000}, "primary-eu": {"default": {"failure_threshold": 2}}}
    )
    models = [
        {
            "model_name": "primary",
            "litellm_params": {"model": "openai/gpt-a", "api_base": "http://127.0.0.1:9/v1"},
            "model_info": {"id": "primary-eu"},
        }
    ]
    with pytest.raises(PolicyError, match=r"primary-eu\.default"):
        GuardedRouter(registry=registry, model_list=models, num_retries=0)


def test_the_frameworks_import_lazily():
    """This file builds each adapter only inside its test (the extras stay optional)."""
    assert importlib.import_module("toolbreaker.integrations")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"risk": "wirte"}, "metadata.risk"),
        ({"required": "yes"}, "metadata.required"),
        ({"business_key": "customer"}, "metadata.business_key"),
        ({"dependency": ""}, "metadata.dependency"),
        ({"operation": 3}, "metadata.operation"),
        ({"idempotency_arg": ""}, "metadata.idempotency_arg"),
    ],
)
def test_tool_metadata_checks_itself_where_the_tool_is_declared(options, field):
    """tool_metadata() (Pydantic AI's metadata=, Google ADK's custom_metadata=) refuses a
    wrong value as the tool is declared, not at the run's first call of the tool."""
    from toolbreaker.integrations._described import tool_metadata

    with pytest.raises(PolicyError) as info:
        tool_metadata(**options)
    assert info.value.field == field
