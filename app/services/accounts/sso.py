"""Single sign-on through the site's OpenID Connect provider
(docs/admins/sso.md): who a validated ID token's claims are here (their org
and role from one claim's values, the user made or found by the provider's
subject), and the OAuth device flow that gets `div login --sso` an API key
without a browser on the machine it runs on. The provider's ID tokens are
checked with joserfc against the provider's published keys: its issuer,
this client as the audience, the expiry (and the nonce of the dashboard's
sign-in, which authlib's Flask client checks)."""
from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple, cast

import requests
from flask import current_app
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet, KeySetSerialization

from divergent.app.extensions import db
from divergent.app.models import ApiKey, User
from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import ORG_NAME, USERNAME, find_org
from divergent.app.services.errors import Forbidden, Invalid, NotFound, Unavailable
from divergent.app.services.rows import add_unique

SCOPES = "openid profile email groups"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# The provider's answers: its metadata and keys are kept this long.
METADATA_SECONDS = 300
PROVIDER_TIMEOUT = 10

# What an ID token may be signed with: the provider's published keys alone,
# never "none" (which authlib's older decoder took) nor a shared secret.
ID_TOKEN_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                       "ES512", "EdDSA"]

_kept: dict[str, tuple[float, dict[str, Any]]] = {}
_lock = threading.Lock()


class NotSignedIn(Forbidden):
    """The provider vouched for someone divergent does not let in."""


def enabled() -> bool:
    return bool(current_app.config["DIV_OIDC_ISSUER"])


def sso_name() -> str | None:
    """What the sign-in page calls the provider; None without one."""
    return current_app.config["DIV_OIDC_NAME"] if enabled() else None


def _issuer() -> str:
    if not enabled():
        raise NotFound("single sign-on is not set up on this site (DIV_OIDC_ISSUER)")
    return current_app.config["DIV_OIDC_ISSUER"].rstrip("/")


def metadata_url() -> str:
    return f"{_issuer()}/.well-known/openid-configuration"


def _get_json(url: str) -> dict[str, Any]:
    try:
        answer = requests.get(url, timeout=PROVIDER_TIMEOUT)
        answer.raise_for_status()
        return _json_object(answer)
    except requests.RequestException as exc:
        raise Unavailable(f"the sign-in provider does not answer ({exc}); try again") from None


def _json_object(answer: requests.Response) -> dict[str, Any]:
    """The provider's answer as a JSON object; Unavailable when it is not one."""
    try:
        found = answer.json()
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise Unavailable(f"the sign-in provider answered {answer.status_code} with no JSON "
                          "object; try again")
    return found


def _endpoint(name: str) -> str:
    found = provider().get(name)
    if not isinstance(found, str) or not found:
        raise Unavailable(f"the sign-in provider names no {name}")
    return found


def _kept_json(url: str, fresh: bool = False) -> dict[str, Any]:
    with _lock:
        kept = _kept.get(url)
    if kept and not fresh and time.monotonic() - kept[0] < METADATA_SECONDS:
        return kept[1]
    value = _get_json(url)
    with _lock:
        _kept[url] = (time.monotonic(), value)
    return value


def provider() -> dict[str, Any]:
    """The provider's metadata; its issuer must be the one configured."""
    found = _kept_json(metadata_url())
    if found.get("issuer", "").rstrip("/") != _issuer():
        raise Unavailable(f"the sign-in provider says it is {found.get('issuer')!r}, "
                          f"not {_issuer()!r} (DIV_OIDC_ISSUER)")
    return found


def id_token_claims(id_token: str) -> dict[str, Any]:
    """The claims of an ID token the provider signed for this client, now
    valid; a key rolled over since they were fetched is fetched again."""
    registry = jwt.JWTClaimsRegistry(
        leeway=60, iss={"essential": True, "value": provider()["issuer"]},
        aud={"essential": True, "value": current_app.config["DIV_OIDC_CLIENT_ID"]},
        sub={"essential": True}, exp={"essential": True})
    for fresh in (False, True):
        published = _kept_json(_endpoint("jwks_uri"), fresh)
        try:
            keys = KeySet.import_key_set(cast(KeySetSerialization, published))
            token = jwt.decode(id_token, keys, algorithms=ID_TOKEN_ALGORITHMS)
            registry.validate(token.claims)
            return dict(token.claims)
        except InvalidKeyIdError:
            continue        # no key with its kid: fetched again once
        except (JoseError, ValueError) as exc:
            raise NotSignedIn(f"the sign-in provider's token does not hold: {exc}") from None
    raise NotSignedIn("the sign-in provider's token is signed by a key it does not publish")


class Membership(NamedTuple):
    org: str
    role: str


def membership(claims: dict[str, Any]) -> Membership:
    """The org and role the configured claim's values give: PREFIX<org>,
    or PREFIX<org>:org_admin. One org, or none is let in."""
    claim, prefix = current_app.config["DIV_OIDC_CLAIM"], current_app.config["DIV_OIDC_GROUP_PREFIX"]
    values = claims.get(claim, [])
    values = [values] if isinstance(values, str) else values
    found: dict[str, str] = {}
    for value in values if isinstance(values, list) else []:
        if not isinstance(value, str) or not value.startswith(prefix):
            continue
        org, _, role = value[len(prefix):].partition(":")
        if ORG_NAME.fullmatch(org) and role in ("", "org_admin"):
            found[org] = "org_admin" if role or found.get(org) == "org_admin" else "member"
    if len(found) != 1:
        which = f"the orgs {', '.join(sorted(found))}" if found else "no divergent org"
        raise NotSignedIn(f"your account at {current_app.config['DIV_OIDC_NAME']} is in "
                          f"{which} ({claim} values {prefix}ORG): a user is in exactly one")
    [(org, role)] = found.items()
    return Membership(org, role)


def user_for_claims(claims: dict[str, Any]) -> User:
    """The user the provider vouched for: found by its subject, else the
    org's user of that name that an admin made for them and no one has used
    (their first sign-in through it), else made; their role follows the
    provider's each time."""
    member = membership(claims)
    subject = f"{claims['iss']} {claims['sub']}"
    user: User | None = db.session.execute(
        db.select(User).filter_by(oidc_subject=subject)).scalar_one_or_none()
    if user is None:
        name = claims.get("preferred_username") or claims["sub"]
        if not isinstance(name, str) or not USERNAME.fullmatch(name):
            raise NotSignedIn(f"the sign-in provider's name for you ({name!r}) is not a "
                              "divergent username")
        user = db.session.execute(db.select(User).filter_by(username=name)).scalar_one_or_none()
        if user is None:
            org = find_org(member.org)
            add_unique(User(org_id=org.id, username=name, role=member.role,
                            oidc_subject=subject, email=claims.get("email")))
            user = db.session.execute(db.select(User).filter_by(username=name)).scalar_one()
        elif user.org.name != member.org or user.oidc_subject is not None or _in_use(user):
            raise NotSignedIn(f"{name} is another account here: a sign-in through the "
                              "provider takes only an account an admin made for it and no one "
                              "has used")
    if user.removed_at is not None or user.org.removed_at is not None:
        raise NotSignedIn(f"{user.username} was removed")
    if user.org.name != member.org:
        raise NotSignedIn(f"{user.username} is in {user.org.name} here, and in {member.org} "
                          "at the sign-in provider: an admin moves them")
    if user.role != "site_admin":        # site admins are made here, never by the provider
        user.role = member.role
    user.oidc_subject = subject
    db.session.commit()
    return user


def _in_use(user: User) -> bool:
    """Whether someone uses the account already (a password, a key) or it
    is a site admin's: never taken over by a name at the provider."""
    keys = db.session.execute(db.select(ApiKey.id).filter_by(user_id=user.id)).first()
    return user.role == "site_admin" or user.password_hash is not None or keys is not None


def _client_auth() -> tuple[str, str]:
    return current_app.config["DIV_OIDC_CLIENT_ID"], current_app.config["DIV_OIDC_CLIENT_SECRET"]


def _post(url: str, data: dict[str, str]) -> requests.Response:
    try:
        return requests.post(url, data=data, auth=_client_auth(), timeout=PROVIDER_TIMEOUT)
    except requests.RequestException as exc:
        raise Unavailable(f"the sign-in provider does not answer ({exc}); try again") from None


def start_device_sign_in() -> dict[str, Any]:
    """A device code from the provider: the code the user enters at the
    provider's page, and the one `div` polls with."""
    endpoint = provider().get("device_authorization_endpoint")
    if not endpoint:
        raise Unavailable("the sign-in provider has no device flow: sign in on the dashboard "
                          "and make a key there")
    answer = _post(endpoint, {"scope": SCOPES})
    if answer.status_code != 200:
        raise Unavailable(f"the sign-in provider refused a device code ({answer.text[:200]})")
    found = _json_object(answer)
    if not all(isinstance(found.get(key), str) for key in ("device_code", "user_code",
                                                           "verification_uri")):
        raise Unavailable("the sign-in provider's device code lacks its parts")
    return {key: found[key] for key in ("device_code", "user_code", "verification_uri",
                                        "verification_uri_complete", "expires_in", "interval")
            if key in found}


class StillWaiting(Exception):
    """The user has not yet finished at the provider: ask again after `interval`."""

    def __init__(self, interval: int):
        super().__init__("waiting for the sign-in")
        self.interval = interval


def finish_device_sign_in(device_code: object, host: str) -> tuple[User, str]:
    """The user and a new API key once they signed in at the provider
    (StillWaiting before that); the key expires as the site says."""
    if not isinstance(device_code, str) or not 0 < len(device_code) <= 512:
        raise Invalid("device_code: the code `POST /auth/device` gave")
    answer = _post(_endpoint("token_endpoint"), {"grant_type": DEVICE_GRANT,
                                                 "device_code": device_code})
    found = _json_object(answer)
    error = found.get("error")
    if error in ("authorization_pending", "slow_down"):
        raise StillWaiting(10 if error == "slow_down" else 5)
    if error == "access_denied":
        raise NotSignedIn("the sign-in was declined at the provider")
    if error == "expired_token":
        raise Invalid("the code expired: run `div login --sso` again")
    if answer.status_code != 200 or not isinstance(found.get("id_token"), str):
        raise Unavailable(f"the sign-in provider did not sign you in ({error or answer.status_code})")
    user = user_for_claims(id_token_claims(found["id_token"]))
    name = f"div login --sso from {host}"[:64]
    return user, create_key(user, name=name,
                            expires_in_days=current_app.config["DIV_OIDC_KEY_DAYS"])
