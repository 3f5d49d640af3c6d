// The demo tenant's page script: a random session ID, the ALTCHA widget, and calls to the
// page's own backend (/demo/api/*), which holds the secret key. No inline script: the CSP
// allows scripts from 'self' only.
const root = document.getElementById('demo');
const $ = (id) => document.getElementById(id);

// A fresh 128-bit session ID, base64url without padding (22 characters).
function newSessionID() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...bytes)).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
}

const sessionID = newSessionID();
$('sid').textContent = sessionID;

function setStatus(el, state, text) {
  el.dataset.state = state;
  el.textContent = text;
}

async function post(path, body) {
  const res = await fetch(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  let data = null;
  try {
    data = await res.json();
  } catch {
    // not JSON (a proxy's error page): report the status only
  }
  return { status: res.status, data };
}

function problemText(status, data) {
  return `${status} ${data?.code ?? ''}${data?.detail ? `: ${data.detail}` : ''}`;
}

// The widget's strict-CSP build ships no proof-of-work code of its own: register the vendored
// SHA-256 worker, a same-origin script (the CSP allows workers from 'self' only).
globalThis.$altcha.algorithms.set('SHA-256', () => new Worker('/demo/static/altcha-sha.js'));

// The widget, pointed at this session's challenge.
const widget = document.createElement('altcha-widget');
const challenge = new URL(root.dataset.challenge, location.href);
challenge.searchParams.set('pk', root.dataset.pk);
challenge.searchParams.set('sid', sessionID);
widget.setAttribute('challenge', challenge.pathname + challenge.search);
$('widget').append(widget);

let startedAt = 0;
let submitted = false;
widget.addEventListener('statechange', (ev) => {
  const { state, payload } = ev.detail;
  if (state === 'verifying') {
    startedAt = performance.now();
    setStatus($('auth'), 'pending', 'Solving the proof of work…');
  } else if (state === 'verified' && payload && !submitted) {
    submitted = true;
    root.dataset.solveMs = String(Math.round(performance.now() - startedAt));
    authorize(payload);
  } else if (state === 'error' || state === 'expired') {
    setStatus($('auth'), 'error', `The captcha ${state === 'error' ? 'failed' : 'expired'}; tick it again.`);
  }
});

async function authorize(payload) {
  setStatus($('auth'), 'pending', 'Solved; authorizing the session…');
  const { status, data } = await post('/demo/api/authorize', { sessionId: sessionID, payload });
  if (status === 200 && data?.authorized) {
    root.dataset.authorized = 'true';
    setStatus($('auth'), 'ok', `Authorized (solved in ${root.dataset.solveMs} ms) until ${new Date(data.expiresAt).toLocaleString()}.`);
    $('token').textContent = data.token;
    $('token-box').hidden = false;
    $('action').disabled = false;
  } else {
    submitted = false;
    setStatus($('auth'), 'error', `Authorization refused: ${problemText(status, data)}`);
  }
}

function record(who, status, data) {
  const li = document.createElement('li');
  li.dataset.status = String(status);
  let text;
  if (status === 200 && data?.ok) {
    li.dataset.outcome = 'ok';
    text = `admitted, ${Math.floor(data.remaining)} left`;
  } else if (status === 200) {
    li.dataset.outcome = 'refused';
    li.dataset.retryAfter = String(data.retryAfter);
    text = `refused: retry after ${data.retryAfter} ms (${Math.ceil(data.retryAfter / 1000)} s)`;
  } else {
    li.dataset.outcome = 'error';
    if (data?.code) li.dataset.code = data.code;
    text = `refused: ${problemText(status, data)}`;
  }
  li.textContent = `${who}: ${text}`;
  $('log').append(li);
  setStatus($('result'), li.dataset.outcome === 'ok' ? 'ok' : 'error', li.textContent);
}

$('action').addEventListener('click', async () => {
  const { status, data } = await post('/demo/api/action', { sessionId: sessionID });
  record('Your session', status, data);
});

$('unauthorized').addEventListener('click', async () => {
  const { status, data } = await post('/demo/api/action', { sessionId: newSessionID() });
  record('A fresh session that never solved the captcha', status, data);
});
