"""Sends one notification: a webhook's POST or an email through the site's
SMTP server. A webhook goes to the address its name resolved to, checked
against the addresses webhooks may reach, so a name that resolves to the
server's own host (or changes its answer between check and use) reaches
nothing; redirects are not followed."""
from __future__ import annotations

import http.client
import ipaddress
import json
import smtplib
import socket
import ssl
from email.message import EmailMessage
from urllib.parse import urlsplit

from flask import current_app

from app.services.notify import address_allowed

TIMEOUT = 10


class NotDelivered(Exception):
    """Why a delivery failed, in words for the org."""


def _pinned_address(host: str, port: int) -> str:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise NotDelivered(f"{host} does not resolve ({exc.strerror or exc})") from None
    addresses = [info[4][0] for info in infos]
    refused = [a for a in addresses if not address_allowed(ipaddress.ip_address(a))]
    if refused:
        raise NotDelivered(f"{host} resolves to {refused[0]}, which webhooks may not reach")
    return addresses[0]


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to a checked address, with the certificate checked for the name."""

    def __init__(self, address: str, hostname: str, port: int):
        super().__init__(hostname, port, timeout=TIMEOUT, context=ssl.create_default_context())
        self._address = address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def send_webhook(url: str, body: dict) -> None:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = _pinned_address(parts.hostname, port)
    if parts.scheme == "https":
        connection = _PinnedHTTPS(address, parts.hostname, port)
    else:
        connection = http.client.HTTPConnection(address, port, timeout=TIMEOUT)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    try:
        connection.request("POST", path, body=json.dumps(body).encode(), headers={
            "Host": host, "Content-Type": "application/json", "User-Agent": "divergent"})
        answer = connection.getresponse()
        answer.read(64 * 1024)
    except (OSError, http.client.HTTPException) as exc:
        raise NotDelivered(f"{parts.hostname}: {exc}") from None
    finally:
        connection.close()
    if not 200 <= answer.status < 300:
        raise NotDelivered(f"{parts.hostname} answered {answer.status} {answer.reason}")


def send_email(address: str, subject: str, text: str) -> None:
    config = current_app.config
    mail = EmailMessage()
    mail["From"] = config["DIV_SMTP_FROM"]
    mail["To"] = address
    mail["Subject"] = subject
    mail.set_content(text + "\n")
    try:
        with smtplib.SMTP(config["DIV_SMTP_HOST"], config["DIV_SMTP_PORT"],
                          timeout=TIMEOUT) as smtp:
            if config["DIV_SMTP_STARTTLS"]:
                smtp.starttls(context=ssl.create_default_context())
            if config["DIV_SMTP_USER"]:
                smtp.login(config["DIV_SMTP_USER"], config["DIV_SMTP_PASSWORD"] or "")
            smtp.send_message(mail)
    except (OSError, smtplib.SMTPException) as exc:
        raise NotDelivered(f"the SMTP server: {exc}") from None
