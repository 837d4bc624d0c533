"""The dashboard's sign-in through the site's OpenID Connect provider
(docs/admins/sso.md): the authorization code flow with PKCE, its state and
nonce kept in the session, by authlib's Flask client; who the ID token says
is let in or told why not (app/services/accounts/sso.py)."""
from __future__ import annotations

import requests
from authlib.integrations.base_client import OAuthError
from flask import current_app, request, session, url_for

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import LOCAL_PATH, login_page, signed_in
from divergent.app.extensions import oauth
from divergent.app.services.accounts import sso
from divergent.app.services.errors import ServiceError


def _client():
    """The provider's client, registered on first use with the site's settings."""
    client = oauth.create_client("sso")
    if client is None:
        oauth.register("sso", client_id=current_app.config["DIV_OIDC_CLIENT_ID"],
                       client_secret=current_app.config["DIV_OIDC_CLIENT_SECRET"],
                       server_metadata_url=sso.metadata_url(),
                       client_kwargs={"scope": sso.SCOPES, "code_challenge_method": "S256",
                                      "timeout": sso.PROVIDER_TIMEOUT})
        client = oauth.create_client("sso")
    return client


@bp.get("/login/sso")
def login_sso():
    target = request.args.get("next", "")
    try:
        sso.provider()
        redirect = _client().authorize_redirect(url_for("dashboard.login_sso_done",
                                                        _external=True))
    except ServiceError as exc:
        return login_page(exc.message, exc.status)
    session["sso_next"] = target if LOCAL_PATH.fullmatch(target) else ""
    return redirect


@bp.get("/login/sso/done")
def login_sso_done():
    try:
        claims = _client().authorize_access_token().get("userinfo")
        if not claims:
            raise sso.NotSignedIn(f"{sso.sso_name()} sent no ID token")
        user = sso.user_for_claims(claims)
    except OAuthError as exc:
        return login_page(f"{sso.sso_name()} did not sign you in: "
                          f"{exc.description or exc.error}", 403)
    except requests.RequestException as exc:
        return login_page(f"{sso.sso_name()} does not answer ({exc}); try again", 503)
    except ServiceError as exc:
        return login_page(exc.message, exc.status)
    return signed_in(user, session.get("sso_next", ""))
