"""Network guard for the test suite, loaded by every Python process the tests start.

When YOLOQ_NETGUARD_LOG is set, any attempt to connect to (or resolve) a
non-loopback address is refused and recorded in that file; the test session
fails if the file is not empty. Unix sockets and loopback are allowed.
"""

import ipaddress
import os
import socket
import traceback

_LOG = os.environ.get("YOLOQ_NETGUARD_LOG")
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


def _is_loopback(host) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode()
    host = str(host).strip("[]").split("%")[0]
    if host in _LOCAL_NAMES:
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return addr.is_loopback or addr.is_unspecified


def _record(what: str) -> None:
    stack = "".join(traceback.format_stack(limit=8)[:-2]).replace("\n", " | ")
    with open(_LOG, "a") as fh:
        fh.write(f"pid={os.getpid()} {what} :: {stack[-1500:]}\n")


def _check(address) -> None:
    if isinstance(address, tuple) and address and not _is_loopback(address[0]):
        _record(f"connect {address!r}")
        raise OSError(101, f"yoloq netguard: non-loopback connection refused: {address!r}")


def _install() -> None:
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_getaddrinfo = socket.getaddrinfo

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _check(address)
        return original_connect(self, address)

    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _check(address)
        return original_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _is_loopback(host):
            _record(f"resolve {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, f"yoloq netguard: lookup refused: {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.getaddrinfo = getaddrinfo


if _LOG:
    _install()
