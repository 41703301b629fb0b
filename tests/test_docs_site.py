"""The documentation site builds with warnings as errors, and covers every adapter.

``mkdocs build --strict`` fails on a broken link, anchor or image, on a page left out of
``nav`` in mkdocs.yml, and on griffe's warnings about the docstrings the API reference is
generated from (a documented parameter the signature lacks, a malformed section).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from once import once

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = sorted(p.stem for p in (ROOT / "src/toolbreaker/integrations").glob("[!_]*.py"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for the run with ``mkdocs build --strict`` (in one worker)."""
    pytest.importorskip("mkdocs", reason="the docs extra installs nothing on Python 3.10")

    def build(into: Path) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(into)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    return once(tmp_path_factory, "docs-site", build)


@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(site: Path) -> None:
    """``mkdocs build --strict`` succeeds and writes the home page and the API reference."""
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "Guard a tool in three lines" in home  # the README is the home page
    reference = (site / "reference/toolbreaker/index.html").read_text(encoding="utf-8")
    assert 'id="toolbreaker.Registry"' in reference
    commands = (site / "reference/cli/index.html").read_text(encoding="utf-8")
    assert "usage: toolbreaker run show [-h] --store STORE [--json] task" in commands


@pytest.mark.slow
def test_the_api_reference_shows_every_public_name_and_no_other(site: Path) -> None:
    """Each public module and each name of its ``__all__`` has its entry on the built
    reference pages, and no other name of a public module has one (the list is
    tests/test_quality.py's ``PUBLIC``)."""
    from test_quality import PUBLIC

    pages = "".join(p.read_text(encoding="utf-8") for p in (site / "reference").rglob("*.html"))
    shown = set(re.findall(r'id="(toolbreaker(?:\.\w+)*)"', pages))
    public = set(PUBLIC) | {
        f"{module}.{name}" for module, names in PUBLIC.items() for name in names
    }
    assert public - shown == set()
    others = {entry for entry in shown if entry.rpartition(".")[0] in PUBLIC} - public
    assert others == set()


def test_the_command_line_page_is_every_commands_own_help() -> None:
    """docs/reference/cli.md is the parser's help of ``toolbreaker`` and of each command
    and subcommand, in the parser's order (docs/hooks.py writes it into the page)."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    from toolbreaker.cli import _parser

    page = (ROOT / "docs/reference/cli.md").read_text(encoding="utf-8")
    assert hooks.COMMANDS_MARKER in page
    written = hooks.cli_reference()
    headings = re.findall(r"^## `(.+)`$", written, re.M)
    assert headings[:2] == ["toolbreaker", "toolbreaker replay"]
    assert "toolbreaker run show" in headings
    assert "toolbreaker run extend" in headings
    commands = [p.prog for p in hooks._commands(_parser())]
    assert headings == ["toolbreaker", *commands]
    assert len(set(headings)) == len(headings)
    assert "--json" in written.split("## `toolbreaker run show`")[1].split("## ")[0]


# Every code block whose content is wider than the block itself: it would scroll, cut off
# at the right edge (pre > code is the scrolling element in mkdocs-material).
_CLIPPED = """() => Array.from(document.querySelectorAll("pre > code"))
    .filter((code) => code.scrollWidth > code.clientWidth + 1)
    .map((code) => [code.scrollWidth, code.clientWidth,
                    code.textContent.split("\\n").find((l) => l.length > 60) || ""])"""


@pytest.mark.slow
def test_no_code_block_is_cut_off_at_1280_pixels(site: Path) -> None:
    """In Chromium at 1280 x 800, the narrowest window the docs are written for, no code
    block of any page is wider than its box (docs/stylesheets/extra.css wraps long lines
    instead of letting them run off the right edge)."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    from chromium import CHROMIUM_ARGS, chromium

    pages = sorted(site.rglob("index.html"))
    assert len(pages) > 30
    clipped: dict[str, list[Any]] = {}
    measured = 0
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
            for path in pages:
                page.goto(path.as_uri())
                measured += page.locator("pre > code").count()
                found = page.evaluate(_CLIPPED)
                if found:
                    clipped[path.relative_to(site).as_posix()] = found
        finally:
            browser.close()
    assert measured > 100  # the pages were measured, not empty
    assert clipped == {}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_adapter_has_a_page_and_a_reference(adapter: str) -> None:
    """Each module of toolbreaker.integrations has its page in docs/integrations/, listed
    in the site's nav, and a ``:::`` line in the API reference."""
    page = f"integrations/{adapter}.md"
    assert (ROOT / "docs" / page).is_file(), f"docs/{page} is missing"
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(rf"^\s+- [^:]+: {re.escape(page)}$", nav, re.M), (
        f"mkdocs.yml: add '      - NAME: {page}' under Integrations in nav"
    )
    reference = (ROOT / "docs/reference/integrations.md").read_text(encoding="utf-8")
    assert f"::: toolbreaker.integrations.{adapter}\n" in reference, (
        f"docs/reference/integrations.md: add '::: toolbreaker.integrations.{adapter}'"
    )


def test_every_readme_link_resolves_on_the_site() -> None:
    """The README's relative links point at files that exist: the README is read on its
    own (a repository page) and as the site's home page (docs/hooks.py relinks it)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which is missing"
        assert target.startswith("docs/"), f"README.md: {target} is not on the site"
