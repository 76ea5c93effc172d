"""Reaching a Ray cluster for `RayExecutor`: the address checked, a deadline, loopback kept.

- **The address** is ``"auto"``, ``"host:port"`` or ``"ray://host:port"`` (a port from 1 to
  65535), checked before Ray is asked (`checked_address`): Ray takes a port out of range or
  a host that is not one, and waits for it.
- **A deadline.** ``ray.init`` waits for an unreachable cluster's head forever (it retries
  every 30 s, and a port that is closed or answers nothing is never given up on), so the head
  is probed first (`probe`): a TCP connection and the gRPC server's first HTTP/2 frame, both
  within the deadline.
- **Loopback.** Ray binds a cluster it starts to the machine's address, whatever
  ``_node_ip_address`` says, unless its ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` switch is off
  when the cluster starts; that switch is read when Ray is imported. `init_ray` turns it off
  whenever it starts a local cluster (Ray imported earlier, or the variable set to 1, too),
  starts a new cluster even where ``RAY_ADDRESS`` or a ``ray start`` cluster would make Ray
  join that one, and stops the cluster if its node is not on loopback after all.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import time
from typing import Any

from clearance._core.errors import ConfigError
from clearance._orchestration.ray_worker import short_text

__all__ = [
    "LOCAL_RAY_ENV",
    "PROBE_TIMEOUT_S",
    "checked_address",
    "import_ray",
    "init_ray",
    "probe",
]

LOCAL_RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
"""Environment Ray is imported with (where not already set): no usage statistics."""

_LOCAL_ONLY_ENV = {"RAY_AUTH_MODE": "disabled"}
"""Also set (where not already set) when the executor starts a loopback-only cluster."""

_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

PROBE_TIMEOUT_S = 5.0
"""Most seconds the probe of a cluster's head waits (less when ``start_timeout_s`` is less)."""

_INSTALL = "pip install 'clearance[ray]'"
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]")
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS = 4


def checked_address(address: object) -> tuple[str, int] | None:
    """The host and port of a Ray address, or ``None`` for ``"auto"``.

    Args:
        address: ``"auto"``, ``"host:port"`` or ``"ray://host:port"`` (an IPv6 host in
            brackets; a port from 1 to 65535).

    Raises:
        ConfigError: Anything else (field ``address``), in one line.
    """
    wanted = "must be 'auto', 'host:port' or 'ray://host:port' (a port from 1 to 65535)"
    if not isinstance(address, str) or len(address) > 300:
        raise ConfigError(f"{wanted}, got {str(address)[:80]!r}", field="address")
    if address == "auto":
        return None
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not _HOST.fullmatch(host) or not port.isascii() or not port.isdigit():
        raise ConfigError(f"{wanted}, got {address[:80]!r}", field="address")
    if not 1 <= int(port) <= 65535:
        raise ConfigError(f"{wanted}, got port {port[:12]}", field="address")
    return host.strip("[]"), int(port)


def probe(host: str, port: int, *, timeout_s: float, address: str) -> None:
    """Check that a gRPC server (a Ray head) answers at ``host:port`` within ``timeout_s``.

    Connects, sends the HTTP/2 connection preface and waits for the server's first frame,
    a SETTINGS frame. With ``RAY_USE_TLS`` set, only the connection is checked.

    Raises:
        ConfigError: Nothing answers in time, or what answers is not a gRPC server
            (field ``ray_address``).
    """
    deadline = time.monotonic() + timeout_s
    tls = os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            if tls:
                return
            connection.settimeout(max(deadline - time.monotonic(), 0.001))
            connection.sendall(_HTTP2_PREFACE)
            header = b""
            while len(header) < 9:
                connection.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = connection.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
    except TimeoutError:
        reason = f"nothing answered within {timeout_s:g} s"
    except OSError as exc:
        reason = short_text(exc.strerror or type(exc).__name__)
    else:
        if len(header) == 9 and header[3] == _SETTINGS:
            return
        reason = "what answers there is not a Ray head (not a gRPC server)"
    raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {reason}",
                      field="ray_address")  # fmt: skip


def import_ray(*, local: bool) -> Any:
    """Import Ray with usage statistics off (and auth off for a loopback-only cluster).

    Raises:
        ConfigError: Ray is not installed.
    """
    for key, value in {**LOCAL_RAY_ENV, **(_LOCAL_ONLY_ENV if local else {})}.items():
        os.environ.setdefault(key, value)
    try:
        import ray
    except ImportError:
        raise ConfigError(f"the Ray executor needs Ray: {_INSTALL}", field="executor") from None
    return ray


def init_ray(ray: Any, address: str | None, *, num_cpus: int, timeout_s: float) -> None:
    """``ray.init``: the cluster at ``address`` (probed first), or a new one on loopback.

    Args:
        ray: The Ray module (`import_ray`).
        address: A checked address (`checked_address`), or ``None`` to start a cluster of
            this process's own, bound to 127.0.0.1, with ``num_cpus`` CPUs.
        num_cpus: CPUs of a cluster started here.
        timeout_s: Most seconds the probe of ``address`` waits (at most `PROBE_TIMEOUT_S`).

    Raises:
        ConfigError: The cluster cannot be reached, Ray cannot start, or a cluster started
            here is not on loopback (it is stopped).
    """
    try:
        if address is not None:
            target = checked_address(address) or _auto_address(address)
            if target is not None:
                probe(*target, timeout_s=min(timeout_s, PROBE_TIMEOUT_S), address=address)
            ray.init(address=address, log_to_driver=False, configure_logging=False)
            return
        _loopback_only()
        ray.init(
            address="local",  # never RAY_ADDRESS's or a `ray start` cluster's
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            configure_logging=False,
        )
    except ConfigError:
        raise
    except ConnectionError as exc:
        raise ConfigError(
            f"cannot reach the Ray cluster at {address!r}: {short_text(str(exc))}",
            field="ray_address",
        ) from None
    except Exception as exc:
        raise ConfigError(
            f"cannot start Ray: {type(exc).__name__}: {short_text(str(exc))}", field="executor"
        ) from None
    node = str(ray.util.get_node_ip_address())
    if not _is_loopback(node):
        ray.shutdown()
        raise ConfigError(
            f"the local Ray cluster bound to {node}, not to loopback: stopped", field="executor"
        )


def _loopback_only() -> None:
    """Make the cluster started next bind to loopback (see the module's docstring)."""
    os.environ[_CLUSTER_SWITCH] = "0"  # for Ray's own processes
    try:
        from ray._private import ray_constants
    except ImportError:  # a Ray without the switch: the check after the start still holds
        return
    ray_constants.ENABLE_RAY_CLUSTER = False  # read when Ray picks the node's address


def _auto_address(address: str) -> tuple[str, int] | None:
    """The host and port ``"auto"`` stands for (``RAY_ADDRESS``, the latest ``ray start``)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address

        found = canonicalize_bootstrap_address(address)
    except Exception:  # none found: Ray says so itself, at once
        return None
    if not isinstance(found, str):
        return None
    try:
        return checked_address(found)
    except ConfigError:
        return None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
