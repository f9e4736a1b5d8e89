// A real OAuth 2.1 / OpenID authorization server for the tests: npm `oidc-provider` (a certified
// OpenID provider) on a loopback port, with its in-memory adapter and its development login and
// consent pages, which the tests fill in and submit like a user would.
//
// Environment (set by tests/it/oauth/support.rs):
//   PORT              the loopback port to listen on (the issuer is http://127.0.0.1:PORT)
//   MCPGATE_PEERS     target/peers, where oidc-provider and jose are installed
//   OIDC_RESOURCES    JSON: { "<resource URL>": { "scope": "a b", "ttl": seconds } }; a token
//                     request for any other resource is refused (invalid_target)
//   OIDC_CLIENTS      JSON array of pre-registered clients (optional)
//
// Access tokens are JWTs (RS256) whose `aud` is the requested resource (RFC 8707), signed by a
// key generated at start and published at the JWKS endpoint. Dynamic client registration
// (RFC 7591), revocation (RFC 7009) and refresh tokens (rotated) are on. Prints `ready` once
// it listens.
//
// For the tests' own eyes, under /test/ (a test-only authorization server, nothing else):
//   GET  /test/stats   { grants: { authorization_code: n, refresh_token: n, ... },
//                        lastIssuedMs, revoked: n, refreshTokens: [values not yet revoked] }
//   POST /test/revoke  destroys every refresh token issued so far (as an administrator
//                      revoking the user's sessions would)

import { createRequire } from 'node:module';
import path from 'node:path';

const peers = process.env.MCPGATE_PEERS;
if (!peers) throw new Error('MCPGATE_PEERS is not set');
const require = createRequire(path.join(peers, 'package.json'));
const { default: Provider, errors } = await import(require.resolve('oidc-provider'));
const jose = await import(require.resolve('jose'));

const port = Number(process.env.PORT);
if (!port) throw new Error('PORT is not set');
const issuer = `http://127.0.0.1:${port}`;
const resources = JSON.parse(process.env.OIDC_RESOURCES ?? '{}');
const clients = JSON.parse(process.env.OIDC_CLIENTS ?? '[]');

const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
const signing = { ...(await jose.exportJWK(privateKey)), alg: 'RS256', use: 'sig', kid: 'test-key' };

const scopes = new Set(['openid', 'offline_access']);
for (const info of Object.values(resources)) {
  for (const scope of (info.scope ?? '').split(' ').filter(Boolean)) scopes.add(scope);
}

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [signing] },
  scopes: [...scopes],
  // Every login is accepted; the account id is the login typed into the form.
  findAccount: (_ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
  features: {
    devInteractions: { enabled: true },
    clientCredentials: { enabled: true },
    registration: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: (_ctx, _client, oneOf) => oneOf,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource) => {
        const info = resources[resource];
        if (!info) throw new errors.InvalidTarget(`unknown resource ${resource}`);
        return {
          scope: info.scope ?? '',
          audience: resource,
          accessTokenTTL: info.ttl ?? 300,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  // Refresh tokens for every client allowed the grant, offline_access asked or not: the
  // gateway's users connect once and stay connected.
  issueRefreshToken: (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: () => true,
  pkce: { required: () => true },
  ttl: {
    Session: 3600,
    Interaction: 600,
    Grant: 3600,
    AuthorizationCode: 60,
    RefreshToken: 3600,
  },
});

provider.on('server_error', (_ctx, error) => console.error('server_error', error));

const grants = {};
let lastIssuedMs = 0;
let revoked = 0;
const refreshTokens = [];
provider.on('grant.success', (ctx) => {
  const type = ctx.oidc.params.grant_type;
  grants[type] = (grants[type] ?? 0) + 1;
  lastIssuedMs = Date.now();
});
provider.on('refresh_token.saved', (token) => refreshTokens.push(token));
// Refresh tokens seen over the whole run, for the tests that look for them where they must
// not be (kept apart from those /test/revoke destroys).
const everRefresh = [];
provider.on('refresh_token.saved', (token) => everRefresh.push(token.jti));
provider.on('grant.revoked', () => { revoked += 1; });

provider.use(async (ctx, next) => {
  if (ctx.path === '/test/stats' && ctx.method === 'GET') {
    ctx.body = { grants, lastIssuedMs, revoked, refreshTokens: everRefresh };
    return;
  }
  if (ctx.path === '/test/revoke' && ctx.method === 'POST') {
    for (const token of refreshTokens.splice(0)) await token.destroy();
    ctx.body = { ok: true };
    return;
  }
  await next();
});

provider.listen(port, '127.0.0.1', () => {
  console.log('ready');
});
