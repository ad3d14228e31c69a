// The Kubernetes API from the browser, with the user's own credentials: a bearer token kept
// in sessionStorage (gone when the tab closes), or none, when the browser presents a client
// certificate in the TLS handshake. The page never holds more rights than its user.

const TOKEN = 'skiff.token';
const MODE = 'skiff.mode';
const USER = 'skiff.user';

export const session = {
  get token() { return sessionStorage.getItem(TOKEN) || ''; },
  get loggedIn() { return sessionStorage.getItem(MODE) !== null; },
  // Who the server says the user is ({ username, namespace }), or null before it is asked.
  get user() {
    try { return JSON.parse(sessionStorage.getItem(USER)); } catch { return null; }
  },
  logIn(token) {
    sessionStorage.setItem(MODE, token ? 'token' : 'cert');
    sessionStorage.removeItem(USER);
    if (token) sessionStorage.setItem(TOKEN, token); else sessionStorage.removeItem(TOKEN);
  },
  logOut() { for (const k of [TOKEN, MODE, USER]) sessionStorage.removeItem(k); },
};

// Called on any 401: the token expired or was revoked.
let unauthorized = () => {};
export function onUnauthorized(f) { unauthorized = f; }

// The message of a watch that lost its connection and is trying again.
export const RECONNECTING = 'The connection to the server was lost: reconnecting…';

export class ApiError extends Error {
  constructor(code, message, reason) {
    super(message);
    this.code = code;
    this.reason = reason || '';
  }
}

function headers(extra) {
  const h = { Accept: 'application/json', ...extra };
  const t = session.token;
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

// The error of a failed answer: the Status object's message when there is one.
async function failure(r) {
  const text = await r.text();
  let status = null;
  try { status = JSON.parse(text); } catch { /* not JSON */ }
  if (r.status === 401) unauthorized();
  const message = (status && status.message) || text.trim() || `${r.status} ${r.statusText}`;
  return new ApiError(r.status, message, status && status.reason);
}

// One request; resolves to the decoded answer, rejects with an ApiError.
export async function request(method, path, body, contentType) {
  const init = { method, headers: headers(body === undefined ? {} : { 'Content-Type': contentType || 'application/json' }) };
  if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
  let r;
  try {
    r = await fetch(path, init);
  } catch (e) {
    // No answer at all (a network change aborts requests in flight): once more, unless
    // it is a POST, which may have created something before the answer was lost.
    if (method === 'POST' && !path.endsWith('reviews')) throw e;
    await new Promise((resolve) => setTimeout(resolve, 300));
    r = await fetch(path, init);
  }
  if (!r.ok) throw await failure(r);
  const text = await r.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path) => request('GET', path);

// The `kubernetes.io` claim of a ServiceAccount token (a JWT), or null for any other token.
function tokenClaims(token) {
  try {
    const payload = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(payload))['kubernetes.io'] || null;
  } catch { return null; }
}

// Asks the server who the user is (a SelfSubjectReview, `kubectl auth whoami`) and keeps it
// in the session. A ServiceAccount's namespace is where the page falls back to when the user
// may not list every namespace; the token's own claims say it when the review is refused.
export async function learnUser() {
  let username = '';
  try {
    const review = await request('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' });
    username = ((review.status || {}).userInfo || {}).username || '';
  } catch (e) {
    if (e.code === 401) throw e;
  }
  const sa = /^system:serviceaccount:([^:]+):/.exec(username);
  const claims = sa ? null : tokenClaims(session.token);
  const user = { username, namespace: sa ? sa[1] : (claims && claims.namespace) || '' };
  sessionStorage.setItem(USER, JSON.stringify(user));
  return user;
}
export const patch = (path, body, type = 'application/merge-patch+json') => request('PATCH', path, body, type);

// A streamed GET: calls onChunk with each piece of text as it arrives, until the answer ends
// or `signal` aborts it.
export async function stream(path, signal, onChunk) {
  const r = await fetch(path, { headers: headers({}), signal });
  if (!r.ok) throw await failure(r);
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    onChunk(value);
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

// Lists `path` then watches it from the list's resourceVersion: `reset(items)` after each
// (re-)list, `event(type, object)` per change. A watch that ends is resumed from the last
// resourceVersion seen; 410 Gone (too old) lists again. `recovered()` after each list. Only a failure waits (with back-off)
// before it tries again: there is no polling. Returns a function that stops it.
export function watch(path, { reset, event, error, recovered }) {
  const ctl = new AbortController();
  const { signal } = ctl;
  const sep = path.includes('?') ? '&' : '?';
  (async () => {
    let rv = null;
    let backoff = 500;
    while (!signal.aborted) {
      try {
        if (rv === null) {
          const list = await get(path);
          if (signal.aborted) return;
          rv = list.metadata.resourceVersion;
          reset(list.items || []);
          if (recovered) recovered();
        }
        let buf = '';
        let expired = false;
        await stream(`${path}${sep}watch=1&allowWatchBookmarks=true&resourceVersion=${encodeURIComponent(rv)}`, signal, (chunk) => {
          buf += chunk;
          let nl;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl).trim();
            buf = buf.slice(nl + 1);
            if (!line) continue;
            const ev = JSON.parse(line);
            if (ev.type === 'ERROR') {
              if (ev.object && ev.object.code === 410) expired = true;
              else throw new ApiError(ev.object.code, ev.object.message, ev.object.reason);
              continue;
            }
            if (ev.object && ev.object.metadata) rv = ev.object.metadata.resourceVersion;
            if (ev.type !== 'BOOKMARK') event(ev.type, ev.object);
          }
        });
        if (expired) rv = null;
        backoff = 500;
      } catch (e) {
        if (signal.aborted) return;
        if (e instanceof ApiError) {
          if (e.code === 410) { rv = null; continue; }
          if (e.code === 404 && rv === null) { error && error(e); return; }
          if (e.code === 401) return;
        }
        if (error) error(e instanceof ApiError ? e : new ApiError(0, RECONNECTING));
        // After a failure the next attempt lists again: what was missed is then shown
        // whatever the server still remembers, and the notice is cleared by `recovered`.
        rv = null;
        await sleep(backoff, signal);
        backoff = Math.min(backoff * 2, 30000);
      }
    }
  })();
  return () => ctl.abort();
}
