// The OpenID Provider Bosun's sign-in tests run against: `oidc-provider`, the certified
// Node.js implementation, on loopback, with the clients and users the test gives.
//
// Started by `bosun_testkit::oidc::OpenIdProvider` with `OP_CONFIG` (JSON: `clients`, as
// oidc-provider takes them, `users`: account id → claims, and `device_flow`: false for a
// provider without the device authorization grant). It prints `listening PORT`
// once it answers; its issuer is `http://127.0.0.1:PORT`. Besides the provider's own
// endpoints, the test drives it through `/__test/…`:
//
// - `POST /__test/clients`: replaces the clients (a test learns its relying party's
//   redirect URI only once that server listens).
// - `POST /__test/users`: replaces the users (account id → claims: `email`, `groups`, …);
//   the next sign-in or refresh sees the change.
// - `POST /__test/rotate`: a new signing key (new `kid`) signs from now on; the old one
//   stays published beside it, as a provider rotating its keys does.
// - `POST /__test/tamper` `{"mode": M}`: the next token response's ID token is re-signed
//   with `aud` wrong (`aud`), expired (`expired`), with another key under the same `kid`
//   (`signature`), with another nonce (`nonce`), with a shared secret (`hs256`), or not
//   at all (`none`).
// - `GET /__test/requests`: the token and end-session requests seen, in order.
//
// Sign-in goes through oidc-provider's development interactions: a login form (`login`,
// `password`) and a consent form. Only the configured users can sign in.
import http from 'node:http';
import * as jose from 'jose';
import Provider from 'oidc-provider';

const config = JSON.parse(process.env.OP_CONFIG || '{}');
let users = config.users || {};
let clients = config.clients || [];
let tamper = null;
const seen = [];

async function newKey() {
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  jwk.kid = `k${Date.now()}${Math.floor(Math.random() * 1e6)}`;
  jwk.alg = 'RS256';
  jwk.use = 'sig';
  return jwk;
}

let keys = [await newKey()];
let provider = null;
let handler = null;

function build(issuer) {
  const p = new Provider(issuer, {
    clients,
    jwks: { keys },
    cookies: { keys: ['bosun-test-cookie-key'] },
    scopes: ['openid', 'offline_access', 'email', 'profile', 'groups'],
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name'],
      groups: ['groups'],
    },
    features: {
      devInteractions: { enabled: true },
      // Off when the test asks for a provider without it (`device_flow: false`).
      deviceFlow: { enabled: config.device_flow !== false },
      revocation: { enabled: true },
      rpInitiatedLogout: { enabled: true },
    },
    pkce: { required: () => true },
    async findAccount(ctx, id) {
      if (!Object.hasOwn(users, id)) return undefined;
      return {
        accountId: id,
        async claims() {
          return { sub: id, ...users[id] };
        },
      };
    },
    // Refresh tokens for every client allowed the grant, whether or not it asked for
    // offline_access: as the identity providers Bosun meets do.
    issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  });
  p.use(async (ctx, next) => {
    if (ctx.path === '/token' || ctx.path.startsWith('/session/end')) {
      seen.push({ path: ctx.path, method: ctx.method });
    }
    await next();
    if (ctx.path === '/token' && ctx.status === 200 && tamper && ctx.body && ctx.body.id_token) {
      const mode = tamper;
      tamper = null;
      ctx.body = { ...ctx.body, id_token: await retoken(ctx.body.id_token, mode) };
    }
  });
  return p;
}

// The ID token re-signed with one thing wrong.
async function retoken(idToken, mode) {
  const claims = jose.decodeJwt(idToken);
  const header = jose.decodeProtectedHeader(idToken);
  let key = keys[0];
  if (mode === 'aud') claims.aud = 'someone-else';
  if (mode === 'expired') {
    const now = Math.floor(Date.now() / 1000);
    claims.iat = now - 7200;
    claims.exp = now - 3600;
  }
  if (mode === 'nonce') claims.nonce = 'not-the-one-sent';
  if (mode === 'signature') key = { ...(await newKey()), kid: header.kid };
  if (mode === 'hs256') {
    return new jose.SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', kid: header.kid })
      .sign(new TextEncoder().encode('a-shared-secret-anyone-could-guess'));
  }
  if (mode === 'none') {
    const part = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
    return `${part({ alg: 'none', typ: 'JWT' })}.${part(claims)}.`;
  }
  return new jose.SignJWT(claims)
    .setProtectedHeader({ alg: 'RS256', kid: key.kid, typ: header.typ })
    .sign(await jose.importJWK(key, 'RS256'));
}

async function body(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : {};
}

const server = http.createServer(async (req, res) => {
  if (!req.url.startsWith('/__test/')) {
    handler(req, res);
    return;
  }
  try {
    if (req.url === '/__test/clients' && req.method === 'POST') {
      clients = await body(req);
      provider = build(provider.issuer);
      handler = provider.callback();
    } else if (req.url === '/__test/users' && req.method === 'POST') {
      users = await body(req);
    } else if (req.url === '/__test/rotate' && req.method === 'POST') {
      keys = [await newKey(), ...keys];
      provider = build(provider.issuer);
      handler = provider.callback();
    } else if (req.url === '/__test/tamper' && req.method === 'POST') {
      tamper = (await body(req)).mode || null;
    } else if (req.url === '/__test/requests' && req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(seen));
      return;
    } else {
      res.writeHead(404);
      res.end('no such test endpoint');
      return;
    }
    res.writeHead(204);
    res.end();
  } catch (e) {
    res.writeHead(500);
    res.end(String(e));
  }
});

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  provider = build(`http://127.0.0.1:${port}`);
  handler = provider.callback();
  process.stdout.write(`listening ${port}\n`);
});
