"""The Python in README.md and every page under docs/ is what users copy, so every block
runs here.

Each block runs as the body of a coroutine (so the fragments' ``await`` and ``return``
work) in a fresh temporary directory holding the example sheets, after a short setup
that binds the names the block takes for granted (a tool, a store, a breaker). Server
addresses in the text are swapped for this suite's real local servers (the fixtures
live beside this file), paths for temporary ones; nothing else is changed. A block
without a setup here fails :func:`test_every_block_has_a_setup`: a new example is
either run or it does not ship. A block that needs a framework (the adapter pages) is
skipped, saying so, on a Python where its extra installs nothing. A setup may define
``__cleanup__()``, called after the block: it stops what the setup started and checks
that the block did what its page says (a stopped run was stopped).

Every block also uses public names only: no import of a private module or name, no
attribute starting with an underscore.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from test_quality import private_imports

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int
    code: str

    @property
    def page(self) -> str:
        """The page, relative to the repository: the first key of :data:`SETUP`."""
        return self.path.relative_to(ROOT).as_posix()

    @property
    def key(self) -> str:
        """The block's first line, without its comment: what its setup is found by."""
        return self.code.strip().splitlines()[0].split("  #")[0].strip()

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            found.append(Block(path, line, match.group(1)))
    return found


BLOCKS = _blocks()

# -- what each block takes for granted ------------------------------------------------------

_SHEET = """
from toolbreaker import Registry
breakers = registry = Registry.from_toml("breakers.toml")
"""

_TOOLS = """
query = "desk lamp"

def fn(query):
    return {"hits": [query]}

async def afn(query):
    return {"hits": [query]}

def run_the_tool(query):
    return {"hits": [query]}

def search_snapshot(query):
    return {"hits": [], "snapshot": True}
"""

_SIBLINGS = """
from toolbreaker import Breaker
inventory = Breaker("inventory", timeout=1.0)
sku = "A-1001"

async def check_stock(sku):
    return await inventory.acall(_stock, sku)

async def _stock(sku):
    return {"sku": sku, "in_stock": 3}

async def reserve_item(sku):
    return await inventory.acall(_stock, sku)

async def fetch_reviews(sku):
    return {"sku": sku, "stars": 4.5}
"""

_BILLING = """
from toolbreaker import Registry
with open("breakers.toml", "a", encoding="utf-8") as sheet:  # the row of the example above
    sheet.write("health_check = { interval_ms = 5000, timeout_ms = 2000 }\\n")
breakers = Registry.from_toml("breakers.toml", store=store)

class BillingClient:
    def ping(self):
        return True

billing_client = BillingClient()
"""

_PUBLISHED = """
from toolbreaker import publish_policy
from toolbreaker.stores import SQLiteStore
publish_policy(SQLiteStore("{sqlite}"), "breakers.toml", note="docs")
"""

_EXERCISE = """
import itertools, json, urllib.parse
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from toolbreaker import idempotency_key
from toolbreaker.testing import model_plan, request_json

class _Model(GenericFakeChatModel):
    prompts: list = []

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompts.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

def _replies():
    ids = itertools.count(1)
    while True:
        prompt = model.prompts[-1]
        turn = max(i for i, m in enumerate(prompt) if isinstance(m, HumanMessage))
        plan = model_plan("plain")
        try:
            name, args = next(plan)
            for message in prompt[turn:]:
                if isinstance(message, ToolMessage):
                    try:
                        result = json.loads(message.content)
                    except ValueError:
                        result = message.content
                    name, args = plan.send(result)
        except StopIteration:
            yield AIMessage("Done.")
            continue
        yield AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{next(ids)}"}])

model = _Model(messages=_replies(), prompts=[])

TOOL_OPTIONS = {
    "search_catalog": {"dependency": "catalog", "fallback": "search_catalog_snapshot"},
    "search_catalog_snapshot": {"dependency": "catalog-snapshot"},
    "get_order": {"dependency": "orders"},
    "create_ticket": {"dependency": "tickets", "operation": "write",
                      "risk": "reversible_write", "business_key": ["customer", "title"],
                      "verify": lambda r: isinstance(r, dict) and "id" in r},
}

def make_tools(base, timeout):
    def get(path, needs):
        answer = request_json("GET", base + path, timeout=timeout)
        if needs not in answer:
            raise ConnectionResetError("malformed answer")
        return answer

    @tool
    def search_catalog(query: str) -> dict:
        \"\"\"Search the live catalog.\"\"\"
        return get("/search?q=" + urllib.parse.quote(query), "results")

    @tool
    def search_catalog_snapshot(query: str) -> dict:
        \"\"\"Search yesterday's snapshot.\"\"\"
        return get("/search_snapshot?q=" + urllib.parse.quote(query), "results")

    @tool
    def get_order(order_id: str) -> dict:
        \"\"\"Track an order.\"\"\"
        return get("/orders/" + urllib.parse.quote(order_id), "status")

    @tool
    def create_ticket(customer: str, title: str) -> dict:
        \"\"\"Open a support ticket.\"\"\"
        key = idempotency_key() or ""
        return request_json("POST", base + "/tickets", body={"title": title, "body": customer},
                            headers={"Idempotency-Key": key}, timeout=timeout)

    return [search_catalog, search_catalog_snapshot, get_order, create_ticket]
"""

_EXERCISE_RUN = """
from langchain.agents import create_agent
from toolbreaker.integrations.langchain import ToolbreakerMiddleware

def run(ctx):
    guard = ToolbreakerMiddleware(registry=ctx.registry, journal=ctx.journal, tools=TOOL_OPTIONS)
    agent = create_agent(model, make_tools(ctx.base_url, ctx.timeout), middleware=[guard])
    agent.invoke({"messages": [("user", ctx.scenario.prompt)]}, context={"task_id": ctx.task})
    return guard
"""


# -- the adapter pages: each framework's own offline model, tools that answer locally ----

_LANGCHAIN = """
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from toolbreaker import Registry
from toolbreaker.integrations.langchain import ToolbreakerMiddleware

class Model(GenericFakeChatModel):  # LangChain's offline model, able to take tools
    def bind_tools(self, tools, **kwargs):
        return self

def searches(times):  # a model's replies: the same search `times` times, then an answer
    for n in range(times):
        call = {"name": "search", "args": {"query": "desk lamp"}, "id": f"call-{n}"}
        yield AIMessage("", tool_calls=[call])
    yield AIMessage("One desk lamp is in stock.")

@tool
def search(query: str) -> dict:
    \"\"\"Search the catalog.\"\"\"
    return {"hits": [query]}

@tool
def search_snapshot(query: str) -> dict:
    \"\"\"Search yesterday's snapshot of the catalog.\"\"\"
    return {"hits": [], "snapshot": True}

tools = [search, search_snapshot]
registry = Registry.from_toml("breakers.toml")
"""

# The whole program of the LangChain page, run as it stands: its sheet is the page's own
# TOML block, and only the model is LangChain's offline one.
_LANGCHAIN_PROGRAM = (
    f"""
import re
with open({str(ROOT / "docs" / "integrations" / "langchain.md")!r}, encoding="utf-8") as _file:
    _page = _file.read()
_sheet = re.search(r"^```toml\\n(.*?)^```", _page, re.S | re.M).group(1)
with open("breakers.toml", "w", encoding="utf-8") as _file:
    _file.write(_sheet)
"""
    + _LANGCHAIN
    + """
def __cleanup__():
    assert result["messages"][-1].content == "One desk lamp is in stock."
    row = registry.get("catalog", "read")  # the page's row guarded the call
    assert row.stats.admitted == 1
    assert row.timeout == 4.0
"""
)

_LANGGRAPH = (
    _LANGCHAIN
    + """
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition

model = Model(messages=searches(1))
guard = ToolbreakerMiddleware(registry=registry)

def call_model(state):
    return {"messages": [model.invoke(state["messages"])]}
"""
)

_LANGCHAIN_STOPPED = (
    _LANGCHAIN
    + """
model = Model(messages=searches(10))  # the same search again and again: a repeated action
guard = ToolbreakerMiddleware(registry=registry)
agent = create_agent(model, tools, middleware=[guard])
"""
)


_HTTPX = """
import httpx
from toolbreaker import Registry
from toolbreaker.integrations.httpx import BreakerTransport
registry = Registry.from_toml("breakers.toml")
"""

_HTTPX_OPEN = (
    _HTTPX
    + """
import toolbreaker
from toolbreaker.testing import ToolService, force_state

service = ToolService().start()
client = httpx.Client(transport=BreakerTransport(registry=registry))
q = "desk lamp"
force_state(registry.get(service.url.removeprefix("http://")), "open")  # its host's breaker

def __cleanup__():
    client.close()
    service.stop()
    assert not service.hits, service.hits  # rejected by the open breaker: never sent
"""
)


_PYDANTIC_AI = """
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from toolbreaker import Budget, Registry, RunGuard
from toolbreaker.stores import SQLiteStore
from toolbreaker.integrations.pydantic_ai import ToolbreakerCapability, arun_stop

store = SQLiteStore("{sqlite}")
registry = Registry.from_toml("breakers.toml")
prompt = "Find a desk lamp"

def searching(times):  # Pydantic AI's scripted model: the same search `times` times
    def reply(messages, info):
        parts = [p for m in messages for p in m.parts]
        if sum(isinstance(p, ToolCallPart) for p in parts) < times:
            return ModelResponse(parts=[ToolCallPart("search", {"query": "desk lamp"})])
        return ModelResponse(parts=[TextPart("One desk lamp is in stock.")])
    return FunctionModel(reply)

def agent_with(model):
    agent = Agent(model)

    @agent.tool_plain
    def search(query: str) -> dict:
        \"\"\"Search the catalog.\"\"\"
        return {"hits": [query]}

    return agent
"""

_PYDANTIC_AI_DEPS = (
    _PYDANTIC_AI
    + """
model = searching(0)

class Deps:  # the run's dependencies: its guard
    def __init__(self, guard):
        self.guard = guard
"""
)

_PYDANTIC_AI_STOPPED = (
    _PYDANTIC_AI
    + """
guard = RunGuard("task-42", budget=Budget(max_repeats=2))
agent = agent_with(searching(10))  # the same search again and again: a repeated action
alerts, saved = [], []
alert, save = alerts.append, saved.append

def __cleanup__():
    assert alerts and saved, "the run should have been stopped"
"""
)


_OPENAI_AGENTS = """
from agents import Agent, Runner, ToolInputGuardrailTripwireTriggered, function_tool
from agents import set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
import toolbreaker
from toolbreaker import Budget, Registry, RunGuard
from toolbreaker.stores import SQLiteStore
from toolbreaker.integrations.openai_agents import protect, run_config

set_tracing_disabled(True)  # the SDK would export traces to OpenAI: stay offline
store = SQLiteStore("{sqlite}")
registry = Registry.from_toml("breakers.toml")
prompt = "Find a desk lamp"

@function_tool
def search_catalog(query: str) -> dict:
    \"\"\"Search the catalog.\"\"\"
    return {"hits": [query]}

def searches(times):  # the SDK's scripted model: the same search `times` times
    call = {"query": "desk lamp"}
    steps = [[function_call("search_catalog", call, call_id=f"c{n}")] for n in range(times)]
    return ScriptedModel([*steps, [assistant_message("One desk lamp is in stock.")]])

agent = Agent(name="shop", model=searches(1), tools=[search_catalog])
"""

_OPENAI_AGENTS_STOPPED = (
    _OPENAI_AGENTS
    + """
guard = RunGuard("ticket-4711", budget=Budget(max_repeats=2))
agent = protect(Agent(name="shop", model=searches(10), tools=[search_catalog]),
                registry=registry, guard=guard)  # the same search again and again
told = []

def notify_operator(condition, next_safe_action, packet):
    told.append(condition)

def __cleanup__():
    assert told, "the run should have been stopped"
"""
)


_MCP = """
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from toolbreaker import Budget, Registry, RunGuard
from toolbreaker.stores import SQLiteStore
from toolbreaker.integrations.mcp import GuardedClient

store = SQLiteStore("{sqlite}")
registry = Registry.from_toml("breakers.toml")
server = MCPServer("catalog")  # a real MCP server, reached over the SDK's in-process transport

@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def search(q: str) -> dict:
    return {"hits": [q]}
"""

_MCP_LOOP = (
    _MCP
    + """
guard = RunGuard("task-42", budget=Budget(max_repeats=2))
calls = [("search", {"q": "usb cable"})] * 5  # the same call again and again: a repeat
alerts = []
alert = alerts.append

def __cleanup__():
    assert alerts, "the run should have been stopped"
"""
)

#: The host loop the MCP page's fragment sits in (its ``break`` ends the loop).
_MCP_HOST_LOOP = """
async with Client(server) as client:
    tools = GuardedClient(client, server="catalog", registry=registry, guard=guard)
    for name, args in calls:
        {block}
"""


# -- the four newer adapter pages: the examples' own scripted agents -------------------------

_EXAMPLE = f"""
import importlib.util, sys
from toolbreaker.stores import MemoryStore
from toolbreaker.testing import ToolService

def load_example(name):  # the example module of examples/, its builders and scripted models
    path = {str(ROOT / "examples")!r} + "/" + name + ".py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # pydantic models resolve their annotations through it
    spec.loader.exec_module(module)
    return module

service = ToolService().start()
store = MemoryStore()
alerts = []
alert = alerts.append

def __cleanup__():
    service.stop()
"""

_ADK = (
    _EXAMPLE
    + """
from google.adk.apps import App
from google.adk.runners import InMemoryRunner
from google.genai import types
example = load_example("google_adk_agent")
agent = example.build_agent(example.looping, service.url)
"""
)

_ADK_RUN = (
    _ADK
    + """
from toolbreaker import Budget, Registry, RunGuard
from toolbreaker.integrations.google_adk import ToolbreakerPlugin, stop_of
registry = Registry.from_toml("breakers.toml")
guard = RunGuard("task-42", budget=Budget(max_repeats=2), journal=store)
runner = InMemoryRunner(app=App(name="shop", root_agent=agent,
                                plugins=[ToolbreakerPlugin(guard, registry=registry)]))
user = "user"
msg = types.Content(role="user", parts=[types.Part(text="where is A-1001?")])
stopped = __cleanup__

def __cleanup__():
    stopped()
    assert alerts and alerts[0]["condition"] == "repeated-action", alerts
"""
)

_CREWAI = (
    _EXAMPLE
    + """
import os
environment = dict(os.environ)
example = load_example("crewai_agent")  # it turns CrewAI's (and OTel's) telemetry off
crew = example.crew_of(example.LoopingModel(), service.url)
stopped_service = __cleanup__

def __cleanup__():
    stopped_service()
    os.environ.clear()
    os.environ.update(environment)
    import gc, warnings
    with warnings.catch_warnings():  # CrewAI leaves its task-output SQLite files open
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
"""
)

#: CrewAI 1.6 leaves the SQLite connections of its task-output storage open, and Python
#: 3.13 warns when a collection finds them: not the block's doing.
_CREWAI_QUIET = """
import warnings
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "unclosed database", ResourceWarning)
    {block}
"""

_CREWAI_RUN = (
    _CREWAI
    + """
from toolbreaker import Registry
from toolbreaker.integrations.crewai import protect, run_stop
registry = Registry.from_toml("breakers.toml")
guard = example.guard_for("task-42", store, registry, max_repeats=2)
stopped = __cleanup__

def __cleanup__():
    stopped()
    assert guard.stopped is not None
"""
)

_LLAMA = (
    _EXAMPLE
    + """
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import MockFunctionCallingLLM
example = load_example("llama_index_agent")
llm = MockFunctionCallingLLM(response_generator=example.looping_model())
agent = FunctionAgent(tools=example.tools(service.url), llm=llm)
prompt = "where is A-1001?"
"""
)

_LLAMA_RUN = (
    _LLAMA
    + """
from toolbreaker import Budget, Registry, RunGuard
from toolbreaker.integrations.llama_index import arun_stop, protect
registry = Registry.from_toml("breakers.toml")
guard = RunGuard("task-42", budget=Budget(max_repeats=2), journal=store)
stopped = __cleanup__

def __cleanup__():
    stopped()
    assert alerts and alerts[0]["condition"] == "repeated-action", alerts
"""
)

_LITELLM = (
    _EXAMPLE
    + """
example = load_example("litellm_router")
backup = ToolService().start()
model_list = [example.deployment("primary", "gpt-primary", service),
              example.deployment("backup", "gpt-backup", backup)]
messages = example.ASK
opened_stores = []

def opened(store):  # a store the block makes, closed after it (its poller with it)
    opened_stores.append(store)
    return store

stopped = __cleanup__

def __cleanup__():
    stopped()
    backup.stop()
    for store in opened_stores:
        store.close()
"""
)

_LITELLM_DOWN = (
    _LITELLM
    + """
from toolbreaker.errors import DeploymentsUnavailable
from toolbreaker import Policy, Registry
from toolbreaker.integrations.litellm import GuardedRouter
from toolbreaker.testing import CHAT_ROUTE
service.outage(CHAT_ROUTE, 503)
router = GuardedRouter(registry=Registry(Policy(failure_threshold=1, cooldown_ms=30_000)),
                       model_list=model_list[:1], num_retries=0)
try:
    router.completion(model="primary", messages=messages)
except Exception:
    pass  # the 503 that opens the primary's breaker
"""
)


_MCP_ROUNDS = f"""
import sys
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult, InputRequiredResult
from toolbreaker import RunGuard
from toolbreaker.integrations.mcp import GuardedClient
from toolbreaker.integrations._mcp_tasks import TasksExtension

# the suite's stdio server that speaks the 2026-07-28 revision (an input round, a task)
server = StdioServerParameters(
    command=sys.executable, args=[{str(ROOT / "tests" / "integrations" / "mcp_rounds_server.py")!r}]
)
guard = RunGuard("refunds")

async def ask_user(request):  # the user says yes
    return ElicitResult(action="accept", content={{"yes": True}})
"""

_MCP_ROUND_AROUND = """
async with Client(server) as client:
    tools = GuardedClient(client.session, server="shop", guard=guard, timeout=10)
    {block}
    assert not isinstance(result, InputRequiredResult), result
    assert guard.state.calls == 1
"""


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a block takes for granted, where a plain string of setup code is not enough."""

    code: str = ""
    #: the framework the block needs: where it is missing (its extra installs nothing on
    #: this Python) the block is skipped, saying so
    needs: str | None = None
    #: this block's own stand-ins: a placeholder of the text (``[...]``) -> what runs
    swaps: dict[str, str] = dataclasses.field(default_factory=dict)
    #: for a fragment of a loop or a ``with``: the code it sits in, at ``{block}``
    around: str | None = None


def _setup_of(block: Block) -> Setup:
    found = SETUP[block.page][block.key]
    return found if isinstance(found, Setup) else Setup(found)


#: Page -> block (by its first line) -> the setup run before it. Keyed by page, so two
#: pages may open blocks alike (every adapter page has its ``import toolbreaker``).
SETUP: dict[str, dict[str, str | Setup]] = {
    "README.md": {
        "from toolbreaker import Registry": "",
    },
    "docs/guide/guard-a-tool.md": {
        "from toolbreaker import Registry": "",
        "from toolbreaker import Breaker": "",
        "result = search.call(fn, query, timeout=4.0)": _SHEET
        + _TOOLS
        + 'search = breakers.get("search", operation="read")\n',
    },
    "docs/guide/boundary-sheet.md": {
        "from toolbreaker import Registry": "",
    },
    "docs/guide/coming-from.md": {
        "from toolbreaker import Breaker, Policy, Verdict, classify_exception": "",
        "from toolbreaker import Breaker, RetryPolicy": "",
    },
    "docs/exercise.md": {
        "from langchain.agents import create_agent": Setup(_EXERCISE, needs="langchain"),
        "from toolbreaker.testing import exercise, shipped_scenarios": Setup(
            _EXERCISE + _EXERCISE_RUN, needs="langchain"
        ),
        "import json": "",
    },
    "docs/integrations/google_adk.md": {
        "from toolbreaker import Budget, Registry, RunGuard": Setup(_ADK, needs="google.adk"),
        "guards = {}": Setup(
            _ADK_RUN.replace(
                "stopped = __cleanup__",
                "stopped = __cleanup__\nalert({'condition': 'repeated-action'})",
            ),
            needs="google.adk",
        ),
        "events = [e async for e in runner.run_async("
        "user_id=user, session_id=sid, new_message=msg)]": Setup(
            _ADK_RUN,
            needs="google.adk",
            around="session = await runner.session_service.create_session("
            'app_name="shop", user_id=user)\nsid = session.id\n{block}',
        ),
    },
    "docs/integrations/crewai.md": {
        "from toolbreaker import Budget, Registry, RunGuard": Setup(
            _CREWAI,
            needs="crewai",
            around=_CREWAI_QUIET.replace(
                "{block}",
                "try:\n        {block}\n    except ValueError:  # the looping crew is stopped\n"
                "        pass",
            ),
        ),
        "with protect(crew, guard=guard, registry=registry):": Setup(
            _CREWAI_RUN, needs="crewai", around=_CREWAI_QUIET
        ),
    },
    "docs/integrations/llama_index.md": {
        "from toolbreaker import Budget, Registry, RunGuard": Setup(
            _LLAMA, needs="llama_index.core"
        ),
        "guard.ensure_tool(": Setup(
            _LLAMA_RUN,
            needs="llama_index.core",
            swaps={},
            around="alert({'condition': 'repeated-action'})\n{block}",
        ),
        "from toolbreaker import idempotency_key": Setup(
            _LLAMA + "def post(path, body, headers):\n    return {'id': 'T-1', **body}\n",
            needs="llama_index.core",
        ),
        "handler = protect(agent, guard=guard, registry=registry).run(user_msg=prompt)": Setup(
            _LLAMA_RUN, needs="llama_index.core"
        ),
    },
    "docs/integrations/litellm.md": {
        "from toolbreaker import Registry": Setup(
            _LITELLM,
            needs="litellm",
            swaps={'SQLiteStore("breakers.db")': 'opened(SQLiteStore("breakers.db"))'},
        ),
        "try:": Setup(_LITELLM_DOWN, needs="litellm"),
    },
    "docs/guide/failing-well.md": {
        'registry.register_local("search_catalog_snapshot", search_snapshot)': _SHEET + _TOOLS,
        "from toolbreaker import Budget, RunGuard, Siblings": _SIBLINGS,
    },
    "docs/guide/watching.md": {
        "from toolbreaker.instrumentation.stream import StreamPublisher, open_stream": _SHEET
        + 'from toolbreaker import RunGuard\nguard = RunGuard("task-1")\n',
    },
    "docs/guide/run-guard.md": {
        "from toolbreaker import Budget, Registry, RunGuard": """
from toolbreaker.stores import SQLiteStore
store = SQLiteStore("{sqlite}")

def find_ticket(key):
    return None
""",
        # A real shell in the block's temporary directory; the page's counts are checked.
        "import subprocess": """
def __cleanup__():
    assert dict(guard.state.class_calls)["reversible_write"] == 2
    assert guard.stopped is None
""",
        "from toolbreaker import shell_risk": "",
    },
    "docs/guide/recorded-runs.md": {
        "from toolbreaker.importing import import_runs": """
import json
# A LangChain history, as messages_to_dict writes it: one tool call and its answer.
ai = {"content": "", "tool_calls": [{"name": "search", "args": {"q": "lamp"}, "id": "c1"}],
      "usage_metadata": {"input_tokens": 900, "output_tokens": 12, "total_tokens": 912},
      "response_metadata": {"model_name": "gpt-4o"}}
tool = {"content": '{"hits": 3}', "tool_call_id": "c1", "status": "success"}
with open("history.json", "w", encoding="utf-8") as history:
    json.dump([{"type": "ai", "data": ai}, {"type": "tool", "data": tool}], history)

def __cleanup__():
    from toolbreaker.cli import main
    assert main(["check-run", "history.jsonl"]) == 0
""",
    },
    "docs/guide/stores-and-fleet.md": {
        "from toolbreaker import Registry": "",
        'version = store.record_put("leases", "checker", '
        '{"holder": "w1", "until": t}, version=0)': """
from toolbreaker.stores import SQLiteStore
store = SQLiteStore("{sqlite}")
t, t2 = 1_700_000_000_000, 1_700_000_005_000
""",
        'breakers = Registry.from_store(RedisStore("redis://cache:6379/0"), poll=5.0)': """
from toolbreaker.stores import RedisStore
from toolbreaker import Registry, publish_policy
publish_policy(RedisStore("redis://cache:6379/0"), "breakers.toml", note="docs")
""",
        'breakers.health_check("billing", billing_client.ping, operation="write")': """
from toolbreaker.stores import SQLiteStore
store = SQLiteStore("{sqlite}")
"""
        + _BILLING,
    },
    "docs/guide/replay.md": {
        "from toolbreaker import TraceRecorder": _SHEET,
    },
    "docs/guide/state-machine.md": {
        "from toolbreaker import Policy": "",
    },
    "docs/observing.md": {
        "from toolbreaker import Registry, TraceRecorder": _TOOLS,
        "from toolbreaker import RunGuard": _SHEET,
        "from toolbreaker.runtime import Attachment": _SHEET,
    },
    "docs/concurrency.md": {
        'guard = RunGuard("task-42", budget=Budget(max_calls_per_turn=8, max_tool_calls=50))': (
            "from toolbreaker import Budget, RunGuard\n"
        ),
        "from toolbreaker import Budget, RunGuard": "",
        "from decimal import Decimal": "",
        'packet = guard.extend(max_cost="2", by="ops@example.com", why="the customer approved")': (
            'from toolbreaker import Budget, RunGuard\nguard = RunGuard("task-42", '
            'budget=Budget(max_cost="1"))\n'
        ),
        "from toolbreaker import Siblings": _SIBLINGS,
        "from toolbreaker import Budget, ModelPrice, RunGuard": "",
        "from toolbreaker.stores import SQLiteStore": "",
    },
    "docs/degradation.md": {
        "import toolbreaker": """
from toolbreaker import Registry
from toolbreaker.stores import SQLiteStore
store = SQLiteStore("{sqlite}")
registry = Registry.from_toml("breakers.toml", store=store)

def charge_card(**args):
    return {"id": "ch_1"}

def find_charge(key, args):
    return None
""",
        "from toolbreaker import prune_done": "",
    },
    "docs/integrations/httpx.md": {
        "from toolbreaker import Registry": Setup("import httpx\n", needs="httpx"),
        "def route(request: httpx.Request) -> tuple[str, str]:": Setup(_HTTPX, needs="httpx"),
        "try:": Setup(
            _HTTPX_OPEN,
            needs="httpx",
            swaps={'"https://api.example.com/search"': 'service.url + "/search"'},
        ),
        "import toolbreaker": "",
    },
    "docs/integrations/langchain.md": {
        "from langchain.agents import create_agent": Setup(
            _LANGCHAIN_PROGRAM,
            needs="langchain",
            swaps={'init_chat_model("openai:gpt-4.1-mini")': "Model(messages=searches(1))"},
        ),
        "from toolbreaker import idempotency_key": Setup(
            "from langchain_core.tools import tool\n", needs="langchain"
        ),
        'result = agent.invoke({"messages": [...]}, context={"task_id": "task-42"})': Setup(
            _LANGCHAIN_STOPPED, needs="langchain"
        ),
        "builder = StateGraph(MessagesState)": Setup(_LANGGRAPH, needs="langgraph"),
        "import toolbreaker": "",
    },
    "docs/integrations/mcp.md": {
        "from toolbreaker import Registry, RunGuard": Setup(
            _MCP, needs="mcp", swaps={'Client("https://catalog.example.com/mcp")': "Client(server)"}
        ),
        "@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))": (
            Setup(
                _MCP + "tickets = None  # never called: the block only declares the tool\n",
                needs="mcp",
            )
        ),
        "result = await tools.call_tool(name, args)": Setup(
            _MCP_LOOP, needs="mcp", around=_MCP_HOST_LOOP
        ),
        "import toolbreaker": "",
        'first = await tools.call_tool("confirm_refund", {"order": "A-2"}, '
        "allow_input_required=True)": Setup(_MCP_ROUNDS, needs="mcp", around=_MCP_ROUND_AROUND),
        "async with Client(server, extensions=[TasksExtension()]) as client:": Setup(
            _MCP_ROUNDS, needs="mcp"
        ),
    },
    "docs/integrations/openai_agents.md": {
        "from toolbreaker.integrations.openai_agents import protect, run_config": Setup(
            _OPENAI_AGENTS, needs="agents"
        ),
        'guard = RunGuard("ticket-4711", journal=store)': Setup(_OPENAI_AGENTS, needs="agents"),
        'instructions = f"You help shoppers. {toolbreaker.system_prompt_line()}"': (
            "import toolbreaker\n"
        ),
        "try:": Setup(_OPENAI_AGENTS_STOPPED, needs="agents"),
    },
    "docs/integrations/pydantic_ai.md": {
        "from toolbreaker import Budget, Registry, RunGuard": Setup(
            _PYDANTIC_AI + "agent = agent_with(searching(1))\n", needs="pydantic_ai"
        ),
        "agent = Agent(": Setup(_PYDANTIC_AI_DEPS, needs="pydantic_ai"),
        "from pydantic_ai.exceptions import RunCancelled": Setup(
            _PYDANTIC_AI_STOPPED, needs="pydantic_ai"
        ),
        "import toolbreaker": "",
    },
    "docs/fleet.md": {
        "from toolbreaker import Registry": _PUBLISHED,
        'breakers = Registry.from_toml("breakers.toml", store=store)': """
from toolbreaker.stores import SQLiteStore
store = SQLiteStore("{sqlite}")
"""
        + _BILLING,
    },
}

#: Addresses and paths in the text -> what they become here.
SWAPS = {
    "/var/lib/myapp/breakers.db": "{sqlite}",
    "/var/lib/app/breakers.db": "{sqlite}",
    "sqlite:///var/tb/breakers.db": "sqlite:///{sqlite}",
    "redis://cache:6379/0": "{redis}",
    "redis://node-1:7000/0": "{cluster}",
    "postgresql://app@db/agents": "{postgres}",
    '{"messages": [...]}': '{"messages": [{"role": "user", "content": "Find a desk lamp"}]}',
}


def _servers_of(code: str) -> set[str]:
    swapped = " ".join(value for key, value in SWAPS.items() if key in code)
    return set(re.findall(r"\{(redis|cluster|postgres)\}", swapped))


# -- the tests ------------------------------------------------------------------------------


def test_blocks_are_told_apart_by_their_first_line() -> None:
    """Two blocks of a page never share a first line, so each setup belongs to one block,
    and every setup still has its block."""
    keys = [(block.page, block.key) for block in BLOCKS]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    setups = {(page, key) for page, blocks in SETUP.items() for key in blocks}
    assert setups <= set(keys), f"setups for blocks that are gone: {setups - set(keys)}"


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_every_block_has_a_setup(block: Block) -> None:
    """Every Python block in the docs is run by this file (a setup, maybe empty)."""
    assert block.key in SETUP.get(block.page, {}), (
        f"{block}: add a setup for this block to tests/stores/test_docs.py "
        f"SETUP[{block.page!r}] (its first line is {block.key!r})"
    )


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_every_block_uses_public_names_only(block: Block) -> None:
    """No block imports a private module or name, or a name outside its module's
    ``__all__``, or reads an underscored attribute."""
    tree = ast.parse(_as_coroutine(block.code))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".") + [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            parts = [p for a in node.names for p in a.name.split(".")]
        elif isinstance(node, ast.Attribute):
            parts = [node.attr]
        else:
            continue
        private = [p for p in parts if p.startswith("_") and not p.startswith("__")]
        assert not private, f"{block}: private name {private[0]!r} in the docs"
    assert private_imports(_as_coroutine(block.code)) == [], block


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_every_block_runs(
    block: Block, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block runs as written (addresses swapped for local servers) and raises nothing."""
    if block.key not in SETUP.get(block.page, {}):
        pytest.fail(f"{block}: no setup (see test_every_block_has_a_setup)")
    setup = _setup_of(block)
    if setup.needs is not None:
        pytest.importorskip(
            setup.needs, reason=f"{block} needs {setup.needs}: its extra installs nothing here"
        )
    values = {"sqlite": str(tmp_path / "breakers.db")}
    for server in _servers_of(block.code + setup.code):
        values[server] = _server_url(server, request)
    for name in ("breakers.toml", "budget.toml"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    code = block.code
    for text, swap in {**SWAPS, **setup.swaps}.items():
        assert text in code or text in SWAPS, f"{block}: {text!r} is no longer in the block"
        code = code.replace(text, swap)
    code_of_setup = setup.code.replace('"redis://cache:6379/0"', '"{redis}"')
    namespace: dict[str, Any] = {"__name__": "docs_block"}
    try:
        exec(compile(_fill(code_of_setup, values), f"setup of {block}", "exec"), namespace)
        if setup.around is not None:
            code = _around(setup.around, code)
        program = _as_coroutine(_fill(code, values))
        exec(compile(program, str(block), "exec"), namespace)
        asyncio.run(namespace["__block__"]())
    finally:
        for value in namespace.values():  # no thread a block started outlives it
            if type(value).__module__.startswith("toolbreaker") and hasattr(value, "close"):
                closed = value.close()
                if inspect.iscoroutine(closed):  # an async close (an ADK plugin's)
                    asyncio.run(closed)
        cleanup = namespace.get("__cleanup__")
        if cleanup is not None:
            cleanup()


# -- helpers --------------------------------------------------------------------------------


def _as_coroutine(code: str) -> str:
    """The block as the body of ``__block__()``; the names it binds stay module globals."""
    names = sorted(_bound(ast.parse(code, feature_version=(3, 10))))
    body = f"global {', '.join(names)}\n{code}" if names else code
    return "async def __block__():\n" + textwrap.indent(body, "    ") + "    pass\n"


def _around(template: str, code: str) -> str:
    """``code`` put in ``template`` at ``{block}``, indented as that line is."""
    line = next(line for line in template.splitlines() if line.strip() == "{block}")
    indent = line[: len(line) - len(line.lstrip())]
    return template.replace(line, textwrap.indent(code, indent).rstrip("\n"))


def _bound(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for child in ast.walk(node):
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                    names.add(child.id)
    return names


def _fill(code: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        code = code.replace("{" + name + "}", value)
    return code


def _server_url(server: str, request: pytest.FixtureRequest) -> str:
    if server == "cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    return str(request.getfixturevalue(f"{server}_url"))
