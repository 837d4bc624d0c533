"""Single sign-on against a real OpenID Connect provider run here
(node-oidc-provider, tests/oidc_provider.py), in real Chromium: the
dashboard's sign-in through the provider maps its groups to the org and
role, lets no one in who is in no org or in two, or is another org's here;
`div login --sso` gets an API key through the device flow, signed in at
the provider's page in a browser, and the key works."""
from __future__ import annotations

import base64
import json
import re
import subprocess
import time

import pytest
import requests
from playwright.sync_api import expect

from tests.oidc_provider import running_provider
from tests.sshd import free_port
from tests.stack import VENV_BIN, running_stack

USERS = {"ada": ["staff", "divergent:e2e"],              # new here: made, a member of e2e
         "pre-made": ["divergent:e2e:org_admin"],        # made by an admin, unused: linked
         "e2e-user": ["divergent:e2e:org_admin"],        # someone's, with a key: never taken
         "eve": ["divergent:e2e", "divergent:other"],     # two orgs
         "mallory": ["staff"],                            # no org
         "other-user": ["divergent:e2e"]}                 # other's user here, e2e's there


@pytest.fixture(scope="module")
def sso_stack(slurm_cluster):
    port = free_port()
    with running_provider(USERS, [f"http://127.0.0.1:{port}/login/sso/done"]) as provider, \
            running_stack(port, None, settings=provider.settings()) as stack:
        yield stack


def _sign_in_at_the_provider(page, login: str) -> None:
    """The provider's own pages: its login form, then its consent."""
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "anything")
    page.click("button:has-text('Sign-in')")
    page.click("button:has-text('Continue')")


def _through_the_dashboard(stack, browser, login: str):
    page = browser.new_context().new_page()
    page.goto(f"{stack.url}/login?next=/volumes")
    page.click("text=Sign in with Example SSO")
    _sign_in_at_the_provider(page, login)
    return page


def _user(stack, name: str) -> dict | None:
    for line in stack.flask("users").stdout.splitlines()[1:]:
        user, org, role, _ = line.split()
        if user == name:
            return {"name": user, "org": org, "role": role}
    return None


def test_the_dashboard_signs_in_through_the_provider_by_its_groups(sso_stack, browser):
    page = _through_the_dashboard(sso_stack, browser, "ada")
    expect(page.locator("h1")).to_have_text("Volumes")        # where it was going
    assert _user(sso_stack, "ada") == {"name": "ada", "org": "e2e", "role": "member"}

    sso_stack.flask("create-user", "e2e", "pre-made")
    page = _through_the_dashboard(sso_stack, browser, "pre-made")
    expect(page.locator("h1")).to_have_text("Volumes")
    assert _user(sso_stack, "pre-made")["role"] == "org_admin"

    for login, says in (("eve", "is in the orgs e2e, other"), ("mallory", "is in no divergent org"),
                        ("e2e-user", "e2e-user is another account here"),
                        ("other-user", "other-user is another account here")):
        page = _through_the_dashboard(sso_stack, browser, login)
        expect(page.locator("[role=alert]")).to_contain_text(says)
        expect(page.locator("h1")).to_have_text("Sign in")
    assert _user(sso_stack, "eve") is None and _user(sso_stack, "mallory") is None
    assert _user(sso_stack, "e2e-user")["role"] == "member"


def test_div_login_sso_gets_a_key_through_the_device_flow(sso_stack, browser, tmp_path):
    env = {**sso_stack.div_env(), "HOME": str(tmp_path)}
    env.pop("DIV_TOKEN")
    env.pop("DIV_API_URL")                          # from the saved config alone, after
    login = subprocess.Popen([str(VENV_BIN / "div"), "login", "--sso", "--api-url",
                              sso_stack.url], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        prompt = login.stderr.readline()
        link = re.match(r"Open (\S+) in a browser and sign in; the code is (\S+)", prompt)
        assert link, prompt
        page = browser.new_context().new_page()
        page.goto(link.group(1))
        page.click("button:has-text('Continue')")            # the code it shows is this one
        _sign_in_at_the_provider(page, "ada")
        out, err = login.communicate(timeout=60)
    finally:
        login.kill()
    assert login.returncode == 0, err
    assert f"logged in to {sso_stack.url} as ada (e2e)" in err
    me = subprocess.run([str(VENV_BIN / "div"), "whoami"], env=env, capture_output=True, text=True)
    assert me.stdout.startswith("ada in e2e (member)"), me.stderr
    keys = json.loads(subprocess.run([str(VENV_BIN / "div"), "keys", "ls", "--json"], env=env,
                                     capture_output=True, text=True).stdout)
    [key] = [k for k in keys if k["name"].startswith("div login --sso from ")]
    assert key["expires_at"] is not None


def test_without_sign_on_the_device_flow_is_not_there(stack):
    assert stack.api("POST", "/auth/device").status_code == 404


@pytest.mark.parametrize("values, org, role", [
    (["divergent:acme"], "acme", "member"),
    (["staff", "divergent:acme:org_admin"], "acme", "org_admin"),
    (["divergent:acme", "divergent:acme:org_admin"], "acme", "org_admin"),
    ("divergent:acme", "acme", "member"),                 # one value, not a list
])
def test_the_claims_values_give_one_org_and_its_role(app_context, values, org, role):
    from divergent.app.services.accounts.sso import membership
    assert membership({"groups": values}) == (org, role)


@pytest.mark.parametrize("values, says", [
    ([], "in no divergent org"), (["divergent:acme:root"], "in no divergent org"),
    (["divergent:Acme"], "in no divergent org"), ({"org": "acme"}, "in no divergent org"),
    (["divergent:acme", "divergent:lab"], "in the orgs acme, lab")])
def test_claims_that_place_no_one_or_two_orgs_let_no_one_in(app_context, values, says):
    from divergent.app.services.accounts.sso import NotSignedIn, membership
    with pytest.raises(NotSignedIn, match=says):
        membership({"groups": values})


def test_a_forged_callback_a_foreign_next_and_a_token_signed_elsewhere_let_no_one_in(
        sso_stack, browser, app):
    # A callback that no sign-in of this browser started (a code and state
    # of someone else's, say): refused in words, no session.
    forged = requests.get(f"{sso_stack.url}/login/sso/done?code=stolen&state=theirs",
                          allow_redirects=False, timeout=30)
    assert forged.status_code == 403 and "did not sign you in" in forged.text
    # After the provider, the browser goes to a path of this site alone.
    page = browser.new_context().new_page()
    page.goto(f"{sso_stack.url}/login?next=//evil.example/x")
    page.click("text=Sign in with Example SSO")
    _sign_in_at_the_provider(page, "ada")
    expect(page.locator("h1")).to_have_text("Runs")
    assert page.url.startswith(sso_stack.url)
    # An ID token this site did not get from its provider: signed with
    # another key, or for another client.
    from joserfc import jwt
    from joserfc.jwk import RSAKey

    from divergent.app.services.accounts.sso import NotSignedIn, id_token_claims
    issuer = sso_stack.settings["DIV_OIDC_ISSUER"]
    app.config.update(DIV_OIDC_ISSUER=issuer, DIV_OIDC_CLIENT_ID="divergent")
    claims = {"iss": issuer, "aud": "divergent", "sub": "ada", "exp": int(time.time()) + 600,
              "groups": ["divergent:e2e"]}
    key = RSAKey.generate_key(2048)

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    with app.app_context():
        for token in (jwt.encode({"alg": "RS256", "kid": "theirs"}, claims, key),
                      jwt.encode({"alg": "RS256"}, claims, key),
                      f"{part({'alg': 'none'})}.{part(claims)}."):
            with pytest.raises(NotSignedIn):
                id_token_claims(token)
