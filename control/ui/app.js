// The dashboard's shell: log-in, the hash router (#/pods, #/pod/NS/NAME ...), the error
// banner. Views live in views.js.

import { get, session, onUnauthorized, RECONNECTING } from './api.js';
import { h, refreshAges } from './table.js';
import { nodesView, workloadsView, podsView, podView, servicesView, eventsView, applyView } from './views.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const banner = document.getElementById('error');
const bannerText = document.getElementById('error-text');

const ui = {
  error(e) {
    bannerText.textContent = e && e.message ? e.message : String(e);
    banner.hidden = false;
  },
  clearError() { banner.hidden = true; bannerText.textContent = ''; },
  // A watch is back: a lost-connection notice no longer holds.
  recovered() { if (bannerText.textContent === RECONNECTING) ui.clearError(); },
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

function route() {
  stop();
  ui.clearError();
  main.replaceChildren();
  if (!session.loggedIn) { stop = loginView(); return; }
  nav.hidden = false;
  const [name, ...args] = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  for (const a of nav.querySelectorAll('a')) a.classList.toggle('current', a.getAttribute('href') === `#/${name === 'pod' ? 'pods' : name}`);
  if (name === 'pod' && args.length === 2) { stop = podView(main, ui, args[0], args[1]); return; }
  const view = ROUTES[name];
  if (!view) { location.replace('#/nodes'); return; }
  stop = view(main, ui);
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
    suspended = true;
  } else if (!document.hidden && suspended) {
    suspended = false;
    route();
  }
});
// Ages on screen stay current (a repaint of text, not a request).
setInterval(() => refreshAges(main), 10000);
route();
