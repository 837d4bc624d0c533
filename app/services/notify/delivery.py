"""Sends one notification: a webhook's POST or an email through the site's
SMTP server. A webhook goes to the address its name resolved to, checked
against the addresses webhooks may reach, so a name that resolves to the
server's own host (or changes its answer between check and use) reaches
nothing; redirects are not followed."""
from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import smtplib
import socket
import ssl
import threading
from email.message import EmailMessage
from typing import cast
from urllib.parse import urlsplit

from flask import current_app

TIMEOUT = 10
# A delivery's whole time: a receiver that answers a byte at a time never
# lets one read time out, and would hold the sender (every org's) forever.
DEADLINE = 20


class NotDelivered(Exception):
    """Why a delivery failed, in words for the org."""


class Unresolved(NotDelivered):
    """A name with no address now: it may have one by the time it is used."""


# IPv6 ranges that carry an IPv4 address (IPv4-compatible, -mapped and
# -translated, NAT64, 6to4, Teredo): Python calls some of them global, and
# through a translator each reaches the IPv4 address inside.
CARRY_IPV4 = tuple(ipaddress.ip_network(net) for net in (
    "::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48",
    "2002::/16", "2001::/32"))


def address_allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Public unicast addresses, and those of the networks the site allows
    (DIV_WEBHOOK_ALLOWED_NETWORKS): never, unless allowed, the server's own
    host, the cluster's network, a cloud's metadata address or an IPv6 one
    that carries any IPv4 address."""
    allowed = current_app.config["DIV_WEBHOOK_ALLOWED_NETWORKS"]
    if any(address in ipaddress.ip_network(net.strip()) for net in allowed.split(",")
           if net.strip()):
        return True
    if address.version == 6 and any(address in net for net in CARRY_IPV4):
        return False
    # Python calls most multicast groups global: a webhook is one host's.
    return address.is_global and not address.is_multicast


def checked_address(host: str, port: int) -> str:
    """The address to connect to for `host` (a name or an address), when
    every address it stands for is one webhooks may reach."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Unresolved(f"{host} does not resolve ({exc.strerror or exc})") from None
    # An IPv4 or IPv6 address (the only families it asks for) is a string.
    addresses = [cast(str, info[4][0]) for info in infos]
    refused = [a for a in addresses if not address_allowed(ipaddress.ip_address(a))]
    if refused:
        shown = host if host == refused[0] else f"{host} ({refused[0]})"
        raise NotDelivered(f"webhooks may not reach {shown}: it is not a public address "
                           "(a site lets them reach its own networks: "
                           "DIV_WEBHOOK_ALLOWED_NETWORKS)")
    return addresses[0]


@contextlib.contextmanager
def _deadline(what: str, connection):
    """Cuts `connection`'s socket once DEADLINE seconds have passed."""
    cut = threading.Event()

    def shut():
        cut.set()
        with contextlib.suppress(OSError, AttributeError):
            connection.sock.shutdown(socket.SHUT_RDWR)
    timer = threading.Timer(DEADLINE, shut)
    timer.start()
    try:
        yield
    except (OSError, http.client.HTTPException, smtplib.SMTPException) as exc:
        if cut.is_set():
            raise NotDelivered(f"{what} took longer than {DEADLINE} s") from None
        raise NotDelivered(f"{what}: {exc}") from None
    finally:
        timer.cancel()
    if cut.is_set():        # an answer cut short may still parse: it is not one
        raise NotDelivered(f"{what} took longer than {DEADLINE} s")


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to a checked address, with the certificate checked for the name."""

    def __init__(self, address: str, hostname: str, port: int):
        super().__init__(hostname, port, timeout=TIMEOUT, context=ssl.create_default_context())
        self._address = address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def send_webhook(url: str, body: dict, delivery: str) -> None:
    """POSTs the body, with `delivery` (the same on every attempt of one
    message) in it and in X-Div-Delivery: delivery is at least once (a
    sender stopped before it heard the answer sends again), and the id lets
    a receiver drop a repeat."""
    parts = urlsplit(url)
    # A channel's URL was checked to have a host name when it was made (notices.py).
    hostname = cast(str, parts.hostname)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = checked_address(hostname, port)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = _PinnedHTTPS(address, hostname, port)
    else:
        connection = http.client.HTTPConnection(address, port, timeout=TIMEOUT)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = hostname if parts.port is None else f"{hostname}:{parts.port}"
    try:
        with _deadline(hostname, connection):
            connection.request("POST", path, body=json.dumps({**body, "delivery": delivery}).encode(),
                               headers={"Host": host, "Content-Type": "application/json",
                                        "User-Agent": "divergent", "X-Div-Delivery": delivery})
            answer = connection.getresponse()
            answer.read(64 * 1024)
    finally:
        connection.close()
    if not 200 <= answer.status < 300:
        raise NotDelivered(f"{hostname} answered {answer.status} {answer.reason}")


def send_email(address: str, subject: str, text: str, delivery: str) -> None:
    """One mail; its Message-ID is the same on every attempt, so a mail
    client shows a repeat once."""
    config = current_app.config
    mail = EmailMessage()
    mail["Message-ID"] = f"<{delivery}@divergent>"
    mail["From"] = config["DIV_SMTP_FROM"]
    mail["To"] = address
    mail["Subject"] = subject
    mail.set_content(text + "\n")
    smtp = smtplib.SMTP(timeout=TIMEOUT)
    with _deadline("the SMTP server", smtp), smtp:
        smtp.connect(config["DIV_SMTP_HOST"], config["DIV_SMTP_PORT"])
        if config["DIV_SMTP_STARTTLS"]:
            smtp.starttls(context=ssl.create_default_context())
        if config["DIV_SMTP_USER"]:
            smtp.login(config["DIV_SMTP_USER"], config["DIV_SMTP_PASSWORD"] or "")
        smtp.send_message(mail)
