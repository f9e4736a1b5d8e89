// Sign-in: the pasted token is checked against the API before it is kept; a rejected token
// gets the gateway's reason, in words.

import { ApiError, api, session } from './api.js';
import { say } from './dom.js';

export class SignIn {
  /** `onSignedIn()` runs once a token was accepted and stored. */
  constructor(root, onSignedIn) {
    this.root = root;
    this.form = root.querySelector('#signin-form');
    this.input = root.querySelector('#token-input');
    this.error = root.querySelector('#signin-error');
    this.button = this.form.querySelector('button[type=submit]');
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.submit(onSignedIn);
    });
  }

  /** Shows the form, with `message` (why the user is here again) when given. */
  show(message) {
    this.input.value = '';
    say(this.error, message ?? '');
    this.input.setAttribute('aria-invalid', message ? 'true' : 'false');
    this.input.focus();
  }

  async submit(onSignedIn) {
    const token = this.input.value.trim();
    if (!token) {
      this.fail('Paste a token first.');
      return;
    }
    this.button.disabled = true;
    say(this.error, '');
    try {
      await api('/mcp/servers', { token });
      session.signIn(token);
      this.input.value = '';
      this.input.setAttribute('aria-invalid', 'false');
      onSignedIn();
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        this.fail(`The token was rejected: ${error.message}`);
      } else {
        this.fail(`Could not sign in: ${error.message}`);
      }
    } finally {
      this.button.disabled = false;
    }
  }

  fail(message) {
    say(this.error, message);
    this.input.setAttribute('aria-invalid', 'true');
    this.input.focus();
  }
}
