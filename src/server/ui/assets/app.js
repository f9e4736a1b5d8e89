// The page's entry point: signed in or not, which view shows (from the URL fragment, which
// never holds a token), and sign-out.

import { session } from './api.js';
import { Audit } from './audit.js';
import { Catalog } from './catalog.js';
import { Chat } from './chat.js';
import { SignIn } from './signin.js';
import { Usage } from './usage.js';

const VIEWS = ['chat', 'catalog', 'audit', 'usage'];

const nav = document.getElementById('nav');
const account = document.getElementById('account');
const main = document.getElementById('main');
const sections = Object.fromEntries(
  ['signin', ...VIEWS].map((name) => [name, document.getElementById(`view-${name}`)]),
);
const views = {
  chat: new Chat(sections.chat),
  catalog: new Catalog(sections.catalog),
  audit: new Audit(sections.audit),
  usage: new Usage(sections.usage),
};
const signIn = new SignIn(sections.signin, () => route(true));

/** Shows the view the URL names (chat by default), or sign-in without a token. */
function route(focus = false) {
  const signedIn = Boolean(session.token);
  nav.hidden = !signedIn;
  account.hidden = !signedIn;
  if (!signedIn) {
    show('signin');
    return;
  }
  const wanted = location.hash.replace(/^#/, '');
  const name = VIEWS.includes(wanted) ? wanted : 'chat';
  show(name);
  for (const link of nav.querySelectorAll('a[data-view]')) {
    if (link.dataset.view === name) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  views[name].show();
  if (focus && name !== 'chat') main.focus();
}

function show(name) {
  for (const [key, section] of Object.entries(sections)) section.hidden = key !== name;
  document.title = name === 'signin' ? 'Sign in · mcpgate' : `${title(name)} · mcpgate`;
}

function title(name) {
  return name.charAt(0).toUpperCase() + name.slice(1);
}

function signOut(message) {
  session.signOut();
  for (const view of Object.values(views)) view.reset();
  route();
  signIn.show(message);
}

document.getElementById('sign-out').addEventListener('click', () => signOut());
session.onRejected((reason) => signOut(`The token was rejected: ${reason}`));
window.addEventListener('hashchange', () => route(true));

route();
if (!session.token) signIn.show();
