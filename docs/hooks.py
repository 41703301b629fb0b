"""MkDocs hook: the site's home page is README.md, so the front page has one source.

``docs/index.md`` only holds a note; its page is the README with its links made relative
to ``docs/`` (``docs/guide/x.md`` becomes ``guide/x.md``), which ``mkdocs build --strict``
then checks like any other page's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"


def on_page_markdown(markdown: str, *, page: Any, **_: Any) -> str:
    """The README, relinked, as the home page; every other page unchanged."""
    if page.file.src_uri != "index.md":
        return markdown
    return re.sub(r"\]\(docs/", "](", README.read_text(encoding="utf-8"))
