"""The sheet's ``[mcp]`` table: the gateway's servers, run and budget, checked at load.

Every mistake is a ``PolicyError`` naming the field, and, read from a file, its line;
the registry (and so every other command that reads the sheet) leaves the table alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from toolbreaker import Registry
from toolbreaker.cli._sheet import sheet_toml
from toolbreaker.core._config import loads_toml
from toolbreaker.errors import PolicyError
from toolbreaker.integrations.mcp_gateway import Gateway, UpstreamSpec
from toolbreaker.integrations.mcp_gateway._sheet import gateway_sheet

GOOD = """
[defaults]
timeout_ms = 5000

[mcp]
run = "{client}@{cwd}"
hide_open_tools = true

[mcp.budget]
max_tool_calls = 200
[mcp.budget.classes.read]
max_calls = 150

[mcp.servers.catalog]
command = ["npx", "-y", "@modelcontextprotocol/server-everything"]
env = { CATALOG_TOKEN = "s3cret-value" }
cwd = "servers"
risk = { create_ticket = "reversible_write" }
allow = ["delete_ticket"]

[mcp.servers.billing]
url = "https://billing.example.com/mcp"
headers = { Authorization = "Bearer s3cret-value" }
hide_open_tools = false

[catalog.default]
failure_threshold = 2

[catalog.search]
fallback = "search_snapshot"

[tools]
local = ["search_snapshot"]
"""


def load(tmp_path: Path, text: str) -> Gateway:
    path = tmp_path / "breakers.toml"
    path.write_text(text, encoding="utf-8")
    return Gateway.from_sheet(path)


def test_a_sheet_names_its_servers_run_and_budget(tmp_path):
    """Each [mcp.servers.NAME] is a server; [mcp] gives the run template and budget; a
    relative cwd is the sheet's directory's; the breaker rows are the registry's."""
    gateway = load(tmp_path, GOOD)
    catalog, billing = gateway.servers["catalog"], gateway.servers["billing"]
    assert catalog.command == ("npx", "-y", "@modelcontextprotocol/server-everything")
    assert catalog.cwd == str(tmp_path.resolve() / "servers")
    assert catalog.risk == {"create_ticket": "reversible_write"}
    assert catalog.allows("delete_ticket")
    assert not catalog.allows("drop_table")
    assert catalog.hide_open_tools is True  # [mcp]'s default
    assert billing.url == "https://billing.example.com/mcp"
    assert billing.hide_open_tools is False
    assert gateway.run == "{client}@{cwd}"
    assert gateway.budget.max_tool_calls == 200
    assert gateway.budget.classes["read"].max_calls == 150
    assert ("catalog", "search") in gateway.registry.boundaries()
    assert gateway.registry.default_timeout == 5.0


def test_secrets_of_a_server_stay_out_of_its_repr(tmp_path):
    """env and headers values are secrets: never in a spec's repr."""
    gateway = load(tmp_path, GOOD)
    assert "s3cret" not in repr(gateway.servers["catalog"])
    assert "s3cret" not in repr(gateway.servers["billing"])


def test_the_registry_and_the_sheet_writer_leave_the_mcp_table_alone():
    """Registry.from_dict reads the same sheet (no dependency named mcp), and the sheet
    writer of tune writes [mcp] back as it was."""
    data = loads_toml(GOOD)
    registry = Registry.from_dict(data)
    assert {dep for dep, _ in registry.boundaries()} == {"catalog"}
    assert loads_toml(sheet_toml(data)) == data


def test_without_a_deadline_in_the_sheet_the_gateways_is_the_default(tmp_path):
    """A sheet whose rows and [defaults] name no timeout_ms takes the gateway's."""
    gateway = load(
        tmp_path, '[mcp.servers.a]\ncommand = ["x"]\n[a.default]\nfailure_threshold = 2\n'
    )
    assert gateway.registry.boundaries()[("a", "default")].timeout == 30.0


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('[mcp.servers.a]\ncommand = ["x"]\nport = 3\n', 3, "unknown field 'port'"),
        ('[mcp.servers.a]\ncommand = ["x"]\nurl = "http://h/mcp"\n', 2, "exactly one of command"),
        ("[mcp.servers.a]\nrisk = {}\n", 1, "exactly one of command"),
        ('[mcp.servers.a]\ncommand = "npx server"\n', 2, "must be a list of strings"),
        ('[mcp.servers.a]\nurl = "ftp://h/mcp"\n', 2, "http:// or https://"),
        ('[mcp.servers.a]\nurl = "http://h/mcp"\nenv = { A = "b" }\n', 3, "for a stdio server"),
        ('[mcp.servers.a]\ncommand = ["x"]\nheaders = { A = "b" }\n', 3, "reached by url"),
        ('[mcp.servers.a]\ncommand = ["x"]\nrisk = { t = "write" }\n', 3, "must be one of read"),
        ('[mcp.servers.a]\ncommand = ["x"]\nallow = "t"\n', 3, "list of tool names"),
        ('[mcp.servers.a]\ncommand = ["x"]\nenv = { A = 1 }\n', 3, "must be a string"),
        ('[mcp.servers.defaults]\ncommand = ["x"]\n', 1, "reserved"),
        ('[mcp.servers."a b"]\ncommand = ["x"]\n', 1, "letters, digits"),
        ('[mcp]\nrun = "{user}"\n', 2, "unknown placeholder {user}"),
        ("[mcp]\nhide_open_tools = 1\n", 2, "true or false"),
        ("[mcp]\nservers = 3\n", 2, "must be a table"),
        ("[mcp]\ncolour = 3\n", 2, "unknown field 'colour'"),
        ("[mcp.budget]\nmax_tool_calls = 0\n", 2, "max_tool_calls"),
        ("[mcp.budget]\nmax_tools = 3\n", 2, "unknown budget field 'max_tools'"),
    ],
)
def test_a_bad_mcp_table_is_an_error_naming_its_line(tmp_path, text, line, words):
    """Each mistake names the file, the line and what is wrong."""
    path = tmp_path / "breakers.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PolicyError) as caught:
        Gateway.from_sheet(path)
    assert caught.value.file == str(path)
    assert caught.value.line == line, caught.value
    assert words in str(caught.value)


def test_a_server_named_twice_is_an_error(tmp_path):
    """The command line's server may not take a name the sheet gives another."""
    path = tmp_path / "breakers.toml"
    path.write_text('[mcp.servers.upstream]\ncommand = ["x"]\n', encoding="utf-8")
    with pytest.raises(PolicyError, match="in the sheet already"):
        Gateway.from_sheet(path, servers=[UpstreamSpec(name="upstream", command=("y",))])


def test_a_gateway_without_a_server_is_an_error():
    """Nothing to serve is said, with what to give."""
    with pytest.raises(PolicyError, match="no server"):
        Gateway.from_sheet(None)


def test_several_servers_over_stdio_need_a_name(tmp_path):
    """stdio serves one server: with several, the one to serve must be named."""
    gateway = load(tmp_path, GOOD)
    with pytest.raises(PolicyError, match="--server NAME"):
        gateway.spec(None)
    with pytest.raises(PolicyError, match="no server 'nope'"):
        gateway.spec("nope")
    assert gateway.spec("billing").url is not None


def test_the_mcp_table_alone_is_parsed_without_a_file():
    """gateway_sheet reads a decoded table (no file: no line), for code that builds one."""
    sheet = gateway_sheet(
        {"mcp": {"servers": {"a": {"command": ["x"], "default_risk": "reversible_write"}}}}
    )
    assert sheet.servers["a"].default_risk == "reversible_write"
    assert sheet.run is None
