// The dashboard's shell: log-in, the hash router (#/pods?namespace=NS, #/pod/NS/NAME ...),
// the namespace picker, the error banner and the notice of a narrowed view. Views live in
// views.js.

import { get, session, learnUser, onUnauthorized, watch, ApiError, RECONNECTING } from './api.js';
import { h, refreshAges } from './table.js';
import { nodesView, workloadsView, podsView, podView, servicesView, eventsView, applyView } from './views.js';

// Every script arrived (boot.js loads the page again when one did not).
sessionStorage.removeItem('skiff.reloaded');

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const banner = document.getElementById('error');
const bannerText = document.getElementById('error-text');
const notice = document.getElementById('notice');
const picker = document.getElementById('namespace-picker');
const whoami = document.getElementById('whoami');

// The namespace chosen last ('' for all of them) and the last single one chosen, kept across
// visits; the URL's `?namespace=` wins over them (a link shows what it was made on).
const NAMESPACE = 'skiff.namespace';
const LAST_NAMESPACE = 'skiff.lastNamespace';

// The kinds a view shows from one namespace only, as the user may not list them all.
const narrowedKinds = new Set();

// Who the user is, asked once a session (beside the first lists, not before them).
let learning = null;
function whoIsUser() {
  if (session.user) return Promise.resolve(session.user);
  if (!learning) learning = learnUser().finally(() => { learning = null; });
  return learning;
}

const ui = {
  error(e) {
    bannerText.textContent = e && e.message ? e.message : String(e);
    banner.hidden = false;
  },
  clearError() { banner.hidden = true; bannerText.textContent = ''; },
  // A watch is back: a lost-connection notice no longer holds.
  recovered() { if (bannerText.textContent === RECONNECTING) ui.clearError(); },
  // Where a view falls back to when the user may not list every namespace (a promise: who
  // the user is may still be being asked).
  ownNamespace() {
    const last = () => localStorage.getItem(LAST_NAMESPACE) || '';
    return whoIsUser().then((u) => u.namespace || last(), last);
  },
  // A list across all namespaces was forbidden: it shows `own` instead (or nothing, when
  // there is no namespace to fall back to).
  narrowed(plural, own, e) {
    narrowedKinds.add(plural);
    const kinds = [...narrowedKinds].join(', ');
    notice.textContent = own
      ? `You may not list ${kinds} in all namespaces: showing namespace "${own}". Choose another namespace above.`
      : `You may not list ${kinds} in all namespaces: choose a namespace above.`;
    notice.title = e.message;
    notice.hidden = false;
    if (!own) { const field = picker.querySelector('input'); if (field) field.focus(); }
  },
};

document.getElementById('error-close').addEventListener('click', () => ui.clearError());

const ROUTES = {
  nodes: nodesView,
  workloads: workloadsView,
  pods: podsView,
  services: servicesView,
  events: eventsView,
  apply: applyView,
};

let stop = () => {};
let loginNote = '';
// While credentials are being tried, a 401 is the answer to show, not an expired session.
let loggingIn = false;

function loginView() {
  nav.hidden = true;
  const token = h('input', { type: 'password', id: 'token', autocomplete: 'off', placeholder: 'Bearer token', 'aria-label': 'Bearer token' });
  const note = h('p', { class: 'note', id: 'login-note' }, loginNote);
  const tryLogIn = async (value) => {
    session.logIn(value);
    loggingIn = true;
    try {
      await get('/api');
      await learnUser();
      loggingIn = false;
      loginNote = '';
      if (!location.hash || location.hash === '#/login') location.hash = '#/nodes'; else route();
    } catch (e) {
      loggingIn = false;
      session.logOut();
      note.textContent = e.code === 401 ? 'The server did not accept these credentials.' : e.message;
    }
  };
  const form = h('form', { class: 'login', id: 'login' },
    h('h1', {}, 'Log in to skiff'),
    h('label', {}, 'Token', token),
    h('button', { class: 'primary', type: 'submit' }, 'Log in'),
    h('p', { class: 'hint' }, 'The admin token, or any token the server accepts. It stays in this tab only.'),
    h('button', { type: 'button', id: 'cert-login', onclick: () => tryLogIn('') }, 'Use my client certificate'),
    note);
  form.addEventListener('submit', (ev) => { ev.preventDefault(); tryLogIn(token.value.trim()); });
  main.replaceChildren(form);
  token.focus();
  return () => {};
}

// ---- the namespace picker ----

// "All namespaces" and each namespace, kept live from a watch, when the user may list
// namespaces; a free-text field otherwise (as the Kubernetes Dashboard does).
let pickerNamespace = '';
let stopPicker = null;

function choose(ns) {
  localStorage.setItem(NAMESPACE, ns);
  if (ns) localStorage.setItem(LAST_NAMESPACE, ns);
  const name = location.hash.replace(/^#\/?/, '').split(/[/?]/)[0] || 'nodes';
  location.hash = `#/${name}${ns ? `?namespace=${encodeURIComponent(ns)}` : ''}`;
}

function namespaceField() {
  const field = h('input', {
    type: 'text', id: 'namespace', class: 'namespace', value: pickerNamespace, placeholder: 'All namespaces',
    spellcheck: 'false', autocomplete: 'off', 'aria-label': 'Namespace (empty for all)',
    title: 'You may not list namespaces: type one (empty for all).',
  });
  field.addEventListener('change', () => choose(field.value.trim()));
  picker.replaceChildren(h('label', {}, 'Namespace ', field));
}

function namespaceSelect() {
  const select = h('select', { id: 'namespace', 'aria-label': 'Namespace' });
  const names = new Set();
  const fill = () => {
    const all = new Set(names);
    if (pickerNamespace) all.add(pickerNamespace);
    select.replaceChildren(h('option', { value: '' }, 'All namespaces'),
      ...[...all].sort().map((n) => h('option', { value: n }, n)));
    select.value = pickerNamespace;
  };
  select.addEventListener('change', () => choose(select.value));
  picker.replaceChildren(h('label', {}, 'Namespace ', select));
  fill();
  return watch('/api/v1/namespaces', {
    reset: (items) => { names.clear(); for (const n of items) names.add(n.metadata.name); fill(); },
    event: (type, n) => { if (type === 'DELETED') names.delete(n.metadata.name); else names.add(n.metadata.name); fill(); },
    error: (e) => {
      if (e instanceof ApiError && e.code === 403) { stopPicker(); namespaceField(); }
    },
  });
}

function showPicker(ns, visible) {
  picker.hidden = !visible;
  pickerNamespace = ns;
  if (!stopPicker) { stopPicker = namespaceSelect(); return; }
  const control = picker.querySelector('#namespace');
  if (control.tagName === 'SELECT' && ![...control.options].some((o) => o.value === ns)) control.append(h('option', { value: ns }, ns));
  control.value = ns;
}

function hidePicker() {
  if (stopPicker) stopPicker();
  stopPicker = null;
  picker.replaceChildren();
}

// ---- routing ----

function route() {
  stop();
  ui.clearError();
  narrowedKinds.clear();
  notice.hidden = true;
  main.replaceChildren();
  if (!session.loggedIn) { hidePicker(); whoami.textContent = ''; stop = loginView(); return; }
  nav.hidden = false;
  whoami.textContent = session.user ? session.user.username : '';
  if (!session.user) whoIsUser().then((u) => { if (session.loggedIn) whoami.textContent = u.username; }, () => {});
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const [name, ...args] = path.split('/').map(decodeURIComponent);
  const params = new URLSearchParams(query || '');
  let ns = localStorage.getItem(NAMESPACE) || '';
  if (params.has('namespace')) {
    ns = params.get('namespace');
    localStorage.setItem(NAMESPACE, ns);
    if (ns) localStorage.setItem(LAST_NAMESPACE, ns);
  } else if (ns && ROUTES[name] && name !== 'nodes') {
    history.replaceState(null, '', `#/${name}?namespace=${encodeURIComponent(ns)}`);
  }
  for (const a of nav.querySelectorAll('a')) a.classList.toggle('current', a.getAttribute('href') === `#/${name === 'pod' ? 'pods' : name}`);
  if (name === 'pod' && args.length === 2) { showPicker(ns, false); stop = podView(main, ui, args[0], args[1]); return; }
  const view = ROUTES[name];
  if (!view) { location.replace('#/nodes'); return; }
  showPicker(ns, name !== 'nodes');
  stop = view(main, ui, ns);
}

onUnauthorized(() => {
  if (!session.loggedIn || loggingIn) return;
  session.logOut();
  loginNote = 'Your session has expired or the token was refused: log in again.';
  route();
});

document.getElementById('logout').addEventListener('click', () => { session.logOut(); loginNote = ''; route(); });
window.addEventListener('hashchange', route);
// A tab in the background holds no watches: the server keeps nothing open for it, and a
// browser's few connections per server stay free for the tab in front. Coming back lists
// again (the watches resume from the fresh lists).
// (The apply view holds none, and keeps what is typed in it.)
let suspended = false;
document.addEventListener('visibilitychange', () => {
  if (document.hidden && session.loggedIn && !location.hash.startsWith('#/apply')) {
    stop();
    stop = () => {};
    hidePicker();
    suspended = true;
  } else if (!document.hidden && suspended) {
    suspended = false;
    route();
  }
});
// Ages on screen stay current (a repaint of text, not a request).
setInterval(() => refreshAges(main), 10000);
route();
