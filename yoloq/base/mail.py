"""Outgoing mail through one SMTP server, configured once with `YOLOQ_SMTP_URL`:

    smtp://[user:password@]host[:port]            plain (port 25), STARTTLS if the server offers it
    smtp+starttls://[user:password@]host[:port]   STARTTLS required (port 587)
    smtps://[user:password@]host[:port]           TLS from the first byte (port 465)

`?from=yoloq@example.org` sets the sender (default `yoloq@<this host>`). Unset: no mail is
sent (`smtp_config()` is None). A configured server that cannot be reached or refuses the
message raises `MailError`, never a quiet skip.
"""

from __future__ import annotations

import smtplib
import socket
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from urllib.parse import parse_qs, unquote, urlsplit

from yoloq.base.errors import UserError
from yoloq.settings import settings

ENV = "YOLOQ_SMTP_URL"
_PORTS = {"smtp": 25, "smtp+starttls": 587, "smtps": 465}
TIMEOUT_S = 20.0


class MailError(RuntimeError):
    """The configured SMTP server could not take the message."""


@dataclass(frozen=True)
class SmtpConfig:
    scheme: str
    host: str
    port: int
    user: str = ""
    password: str = ""
    sender: str = ""

    def describe(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def smtp_config(url: str | None = None) -> SmtpConfig | None:
    """The SMTP server from `url` or `YOLOQ_SMTP_URL`; None when neither is set."""
    url = url if url is not None else settings().smtp_url or ""
    if not url.strip():
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in _PORTS or not parts.hostname:
        raise UserError(ENV, f"cannot read {url!r} as an SMTP server",
                        "write smtp://host:25, smtp+starttls://user:pass@host:587 or smtps://host:465")
    try:
        port = parts.port or _PORTS[parts.scheme]
    except ValueError:
        raise UserError(ENV, f"the port in {url!r} is not a number", "write e.g. smtp://host:25") from None
    sender = (parse_qs(parts.query).get("from") or [f"yoloq@{socket.gethostname()}"])[0]
    return SmtpConfig(parts.scheme, parts.hostname, port, unquote(parts.username or ""),
                      unquote(parts.password or ""), sender)


def send_mail(config: SmtpConfig, to: str, subject: str, body: str) -> None:
    """Send one plain-text message; `MailError` naming the server when it fails."""
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = config.sender, to, subject
    message.set_content(body)
    try:
        with _connect(config) as smtp:
            if config.user:
                smtp.login(config.user, config.password)
            smtp.send_message(message)
    except (OSError, smtplib.SMTPException) as exc:
        raise MailError(f"SMTP server {config.describe()} ({ENV}) did not take the mail to {to}: "
                        f"{exc.__class__.__name__}: {exc}") from exc


def _connect(config: SmtpConfig) -> smtplib.SMTP:
    if config.scheme == "smtps":
        return smtplib.SMTP_SSL(config.host, config.port, timeout=TIMEOUT_S,
                                context=ssl.create_default_context())
    smtp = smtplib.SMTP(config.host, config.port, timeout=TIMEOUT_S)
    smtp.ehlo()
    if config.scheme == "smtp+starttls" or smtp.has_extn("starttls"):
        smtp.starttls(context=ssl.create_default_context())
        smtp.ehlo()
    return smtp
