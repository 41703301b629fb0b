"""httpx adapter: a transport that puts a circuit breaker in front of every host.

Wrap the transport an :class:`httpx.Client` (or :class:`httpx.AsyncClient`) sends through;
every request asks the breaker of its host first::

    registry = toolbreaker.Registry()
    client = httpx.Client(transport=BreakerTransport(registry=registry))
    client.get("https://api.example.com/search")   # raises toolbreaker.errors.CircuitOpen when open

What counts (:func:`toolbreaker.runtime.classify_status` on the status line, the breaker's
classifier on a raised exception):

- 5xx and 429 are failures; a ``Retry-After`` (or ``retry-after-ms``) on a 429 or 503 goes
  into the core with the failure, so an opening waits at least that long;
- 1xx-3xx are successes; every other 4xx (404, 422 ...) is ignored: a bad request says
  nothing about the host's health;
- httpx timeouts and network errors (``ConnectError``, ``ReadError``, a reset connection)
  are failures; a cancelled request is ignored.

A rejected request is never sent. By default the transport raises
:class:`toolbreaker.errors.CircuitOpen` (``.result`` is the tool-unavailable result for the
model, ``.retry_after`` the whole seconds to wait); with ``on_reject="respond"`` it
returns a synthesized ``503`` instead, with ``Retry-After``, a ``Toolbreaker-Rejected``
header naming the reason and the tool-unavailable result as its JSON body.

The outcome is judged when the response *headers* arrive: an error while the body is
streamed later is the caller's to handle. The deadline is httpx's own ``timeout``; the
breaker's ``timeout`` (when set) only marks a success that arrived after it as ambiguous.
The sync and async transports share every decision; each only sends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal

from toolbreaker._extras import require
from toolbreaker.errors import PolicyError
from toolbreaker.integrations._described import check_adapter
from toolbreaker.integrations._kit import Breaker, Registry, Verdict
from toolbreaker.runtime import Permit, Rejection, classify_status

require("httpx", "httpx")

import httpx  # noqa: E402 - after require(), which words the missing-extra error

__all__ = [
    "AsyncBreakerTransport",
    "BreakerTransport",
]

#: Maps a request to its breaker: a dependency name, or ``(dependency, operation)``.
KeyFunction = Callable[[httpx.Request], str | tuple[str, str]]

#: What a rejected request becomes: ``raise`` :class:`~toolbreaker.errors.CircuitOpen`, or
#: ``respond`` with a synthesized 503.
OnReject = Literal["raise", "respond"]

#: The header a synthesized 503 carries; its value is the rejection reason (``cooldown``,
#: ``probe-limit``, ``isolated``, ``store-unavailable``).
REJECTED_HEADER: Final = "Toolbreaker-Rejected"


def host_key(request: httpx.Request) -> str:
    """The default key: the request's host and, when not the scheme's default, its port.

    ``https://api.example.com/x`` gives ``api.example.com``; ``http://127.0.0.1:8080/``
    gives ``127.0.0.1:8080``. User info never takes part.
    """
    return request.url.netloc.decode("ascii")


def classify_response(response: httpx.Response) -> Verdict:
    """The default response classifier: :func:`classify_status` on status and headers."""
    return classify_status(response.status_code, response.headers)


class _Guarding:
    """What the sync and async transports share: picking the breaker, judging, rejecting."""

    def __init__(
        self,
        registry: Registry | None,
        key: KeyFunction,
        on_reject: OnReject,
        classify: Callable[[httpx.Response], Verdict],
    ) -> None:
        check_adapter(registry=registry, functions={"key": key, "classify": classify})
        if on_reject not in ("raise", "respond"):
            raise PolicyError(
                f"on_reject must be 'raise' or 'respond', got {on_reject!r}", field="on_reject"
            )
        self.registry = registry if registry is not None else Registry()
        self.key = key
        self.on_reject: OnReject = on_reject
        self.classify = classify

    def breaker_for(self, request: httpx.Request) -> Breaker:
        """The breaker that guards ``request`` (created on first use)."""
        key = self.key(request)
        if isinstance(key, tuple):
            return self.registry.get(*key)
        return self.registry.get(key)

    def _admitted(
        self, request: httpx.Request, admission: Permit | Rejection
    ) -> Permit | httpx.Response:
        """The permit to send ``request``, or the response that replaces it.

        Raises:
            CircuitOpen: the breaker rejected the request and ``on_reject`` is ``raise``.
        """
        if isinstance(admission, Permit):
            return admission
        return self._rejected(request, admission)

    def _rejected(self, request: httpx.Request, rejection: Rejection) -> httpx.Response:
        error = rejection.error()
        if self.on_reject == "raise":
            raise error
        return httpx.Response(
            503,
            headers={"Retry-After": str(error.retry_after), REJECTED_HEADER: error.reason},
            json=error.result,
            request=request,
        )


class BreakerTransport(_Guarding, httpx.BaseTransport):
    """A sync httpx transport that guards every request with its host's breaker.

    Args:
        transport: the transport that really sends; a default
            :class:`httpx.HTTPTransport` when omitted (pass your own for ``verify``,
            ``http2``, ``limits``, ``retries`` ...).
        registry: where the breakers live; share one between clients to share state.
            A private :class:`~toolbreaker.Registry` when omitted.
        key: maps a request to its breaker (default :func:`host_key`); return
            ``(dependency, operation)`` to give, say, writes their own breaker.
        on_reject: ``raise`` :class:`~toolbreaker.errors.CircuitOpen` (default) or ``respond``
            with a synthesized 503.
        classify: judges a response (default :func:`classify_response`).
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        registry: Registry | None = None,
        key: KeyFunction = host_key,
        on_reject: OnReject = "raise",
        classify: Callable[[httpx.Response], Verdict] = classify_response,
    ) -> None:
        super().__init__(registry, key, on_reject, classify)
        self.transport = transport if transport is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` if its breaker admits it; record the outcome.

        Raises:
            CircuitOpen: rejected locally (with ``on_reject="raise"``); nothing was sent.
            httpx.TransportError: whatever the inner transport raised, after recording it.
        """
        permit = self._admitted(request, self.breaker_for(request).allow())
        if isinstance(permit, httpx.Response):
            return permit
        try:
            response = self.transport.handle_request(request)
        except BaseException as exc:
            permit.record(exc)
            raise
        permit.record(self.classify(response))
        return response

    def close(self) -> None:
        """Close the inner transport."""
        self.transport.close()


class AsyncBreakerTransport(_Guarding, httpx.AsyncBaseTransport):
    """The async twin of :class:`BreakerTransport`, for :class:`httpx.AsyncClient`.

    Args:
        transport: the transport that really sends; a default
            :class:`httpx.AsyncHTTPTransport` when omitted.
        registry: where the breakers live; share one between clients to share state.
        key: maps a request to its breaker (default :func:`host_key`).
        on_reject: ``raise`` :class:`~toolbreaker.errors.CircuitOpen` (default) or ``respond``
            with a synthesized 503.
        classify: judges a response (default :func:`classify_response`).
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        registry: Registry | None = None,
        key: KeyFunction = host_key,
        on_reject: OnReject = "raise",
        classify: Callable[[httpx.Response], Verdict] = classify_response,
    ) -> None:
        super().__init__(registry, key, on_reject, classify)
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` if its breaker admits it; record the outcome.

        Raises:
            CircuitOpen: rejected locally (with ``on_reject="raise"``); nothing was sent.
            httpx.TransportError: whatever the inner transport raised, after recording it.
        """
        # The breaker's store round trips are awaited: a shared store never blocks the loop.
        permit = self._admitted(request, await self.breaker_for(request).aadmit())
        if isinstance(permit, httpx.Response):
            return permit
        try:
            response = await self.transport.handle_async_request(request)
        except BaseException as exc:
            await permit.arecord(exc)
            raise
        await permit.arecord(self.classify(response))
        return response

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self.transport.aclose()
