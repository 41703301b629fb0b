"""Helpers the classifier's tests share: fake third-party exceptions, HTTP dates, chains."""

from __future__ import annotations

import email.message
import itertools
from datetime import datetime, timezone
from email.utils import format_datetime
from urllib.error import HTTPError

NOW = 1_700_000_000.0  # a fixed wall-clock instant, in epoch seconds


def fake(name, module, *bases, **attrs):
    """A class that looks like ``module.name`` to the classifier."""
    return type(name, bases or (Exception,), {"__module__": module, **attrs})


def make(cls, *args, **attrs):
    """An instance of ``cls`` with extra instance attributes."""
    exc = cls(*args)
    for key, value in attrs.items():
        setattr(exc, key, value)
    return exc


def http_date(offset_seconds):
    """An IMF-fixdate ``offset_seconds`` after NOW."""
    return format_datetime(
        datetime.fromtimestamp(NOW + offset_seconds, tz=timezone.utc), usegmt=True
    )


def chained(*links, attribute="__cause__"):
    """links[0] with links[1] as its cause (or context), links[1] with links[2], ..."""
    for outer, inner in itertools.pairwise(links):
        setattr(outer, attribute, inner)
    return links[0]


def url_http_error(code, headers=None):
    """A real urllib.error.HTTPError, built without any network."""
    message = email.message.Message()
    for key, value in (headers or {}).items():
        message[key] = value
    exc = HTTPError("http://tool.invalid/", code, "status", message, None)
    exc.close()
    return exc
