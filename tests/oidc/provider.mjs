// A real OpenID Connect provider for the tests (node-oidc-provider, as a
// site's Keycloak or Dex would answer): the authorization code flow with
// PKCE and the device flow, its own login and consent pages (devInteractions),
// users and their groups from OIDC_USERS. tests/oidc_provider.py starts it.
import Provider from 'oidc-provider';

const port = Number(process.env.PORT);
const users = JSON.parse(process.env.OIDC_USERS);

const provider = new Provider(`http://127.0.0.1:${port}`, {
  clients: [{
    client_id: process.env.CLIENT_ID,
    client_secret: process.env.CLIENT_SECRET,
    redirect_uris: JSON.parse(process.env.REDIRECT_URIS),
    grant_types: ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  features: { devInteractions: { enabled: true }, deviceFlow: { enabled: true } },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: { openid: ['sub'], profile: ['preferred_username'], email: ['email'], groups: ['groups'] },
  conformIdTokenClaims: false,
  cookies: { keys: ['divergent-tests-only'] },
  async findAccount(ctx, id) {
    if (!users[id]) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, email: `${id}@example.org`,
                 groups: users[id] };
      },
    };
  },
});
provider.listen(port, '127.0.0.1', () => console.log(`listening on ${port}`));
