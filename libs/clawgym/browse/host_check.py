"""Which Host headers the rollout browser answers: `HostCheck`, an ASGI middleware, refuses the rest.

Against DNS rebinding: a page on `evil.example` whose name is re-pointed at 127.0.0.1 reaches a
loopback server as same-origin, but its requests still say `Host: evil.example`. So the browser
answers only the names it is served by:

- the address it binds, and `localhost`, `127.0.0.1` and `[::1]` when that is loopback or every
  address (0.0.0.0, ::);
- any IP address: rebinding needs a DNS name, and a page served from an IP is that IP's own;
- the allow-list (`clawgym browse --allow-host`, `store.browse_allowed_hosts`): exact names,
  `*.example.com` for its subdomains, `*` for any name (which turns the check off).

Any port: a tunnel (`ssh -L 9000:localhost:8600`) moves it, and it proves nothing against rebinding.
"""

import ipaddress
from collections.abc import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
EVERY_ADDRESS = ("", "0.0.0.0", "::")


def host_name(header: str) -> str:
    """The name of a Host header, without its port or an IPv6 literal's brackets, lower-cased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else ""
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    name = host_name(host)
    return name == "localhost" or (is_ip(name) and ipaddress.ip_address(name).is_loopback)


class AllowedHosts:
    """The Host names a browser bound to `bound` answers (see the module docstring)."""

    def __init__(self, bound: str, allow: Iterable[str] = ()) -> None:
        names = {host_name(bound), *(host_name(a) for a in allow if a.strip())}
        if is_loopback(bound) or bound.strip() in EVERY_ADDRESS:
            names.update(LOOPBACK_NAMES)
        self.any = "*" in names
        self.suffixes = tuple(n[1:] for n in names if n.startswith("*."))  # "*.example.com" → ".example.com"
        self.names = frozenset(n for n in names if n and not n.startswith("*"))

    def __contains__(self, header: str) -> bool:
        name = host_name(header)
        if not name:
            return False
        return self.any or name in self.names or is_ip(name) or name.endswith(self.suffixes)


class HostCheck:
    """Answers a request whose Host is not in `allowed` with 403 and a one-line reason; passes the rest."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts, headers: dict[str, str] | None = None) -> None:
        self.app = app
        self.allowed = allowed
        self.headers = headers or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":  # the browser serves no websockets; lifespan passes
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if host not in self.allowed:
                detail = (
                    f"Host {host!r} is not one this rollout browser is served by (a DNS-rebinding page?); "
                    "open it by its address, or allow the name with --allow-host / store.browse_allowed_hosts"
                )
                await JSONResponse({"detail": detail}, 403, headers=self.headers)(scope, receive, send)
                return
        await self.app(scope, receive, send)
