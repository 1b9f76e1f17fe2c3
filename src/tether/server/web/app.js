// tether's web page: the session list (search, directory, sub-agents nested, status live from GET /events),
// a session's transcript (paged: the tail, then earlier pages on demand) and its live run (GET
// /sessions/{id}/events: text as it streams, tool calls as they run, approvals), a prompt box, cancel,
// fork, revert, share. Every event frame has an id: EventSource reconnects with Last-Event-ID on its own,
// and the server replays what was missed; the page renders each journal entry once, by its seq, so a
// dropped connection loses nothing and shows nothing twice.
import { el, markdown, ago, oneLine, pretty, keyArgument, STATUS_TEXT } from './render.js';
import { Transcript } from './transcript.js';

const EVENT_SPAN = 1_000_000;
const LIVE_OFFSET = EVENT_SPAN / 2;
const PAGE = 100;
const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, 'network', 'the server cannot be reached');
  }
  const json = (response.headers.get('content-type') || '').includes('json') ? await response.json() : null;
  if (!response.ok) {
    const e = (json && json.error) || {};
    if (response.status === 401) signIn();
    throw new ApiError(response.status, e.code || 'http_error', e.message || `HTTP ${response.status}`, e.details);
  }
  return json;
}

function plural(n, word) {
  return `${n.toLocaleString()} ${word}${n === 1 ? '' : 's'}`;
}

function toast(message, bad = false) {
  const node = el('div', { class: `toast${bad ? ' bad' : ''}`, role: bad ? 'alert' : 'status', text: message });
  $('toasts').append(node);
  setTimeout(() => node.remove(), bad ? 7000 : 3500);
}

function failed(err, what) {
  toast(`${what}: ${err.message}`, true);
}

// --- sign-in: the token from the URL's fragment, or asked for, traded for an HttpOnly cookie ---------------

let signingIn = null;

async function signIn() {
  if (signingIn) return signingIn;
  const dialog = $('token-dialog');
  signingIn = new Promise((resolve) => {
    $('token-form').onsubmit = async (event) => {
      event.preventDefault();
      const ok = await exchange($('token-input').value.trim());
      if (ok) {
        dialog.close();
        signingIn = null;
        resolve(true);
        start();
      } else {
        $('token-error').textContent = 'That is not this server’s token.';
        $('token-error').hidden = false;
      }
    };
  });
  if (!dialog.open) dialog.showModal();
  return signingIn;
}

async function exchange(token) {
  if (!token) return false;
  const response = await fetch('/auth/session', {
    method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token }),
  });
  return response.ok;
}

async function authenticate() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get('token');
  if (token) {
    history.replaceState(null, '', location.pathname + location.search); // the token leaves the address bar
    if (!(await exchange(token))) toast('The token in the link is not this server’s.', true);
  }
  const state = await api('GET', '/auth/session');
  if (state.token_required && !state.authenticated) {
    signIn();
    return false;
  }
  return true;
}

// --- the session list ---------------------------------------------------------------------------------------

const list = {
  sessions: new Map(), // id -> SessionInfo
  order: [], // ids as the server listed them
  statuses: new Map(),
  open: new Set(), // parents whose children are shown
  cursor: null,
  query: '',
  directory: '',
  feed: null,
  loaded: false,
};

function listPath(cursor) {
  const params = new URLSearchParams({ children: 'true', limit: '100' });
  if (list.query) params.set('q', list.query);
  if (list.directory) params.set('directory', list.directory);
  if (cursor) params.set('cursor', cursor);
  return `/sessions?${params}`;
}

async function loadSessions(more = false) {
  const wanted = [list.query, list.directory];
  const page = await api('GET', listPath(more ? list.cursor : null));
  if (wanted[0] !== list.query || wanted[1] !== list.directory) return; // the filter changed meanwhile
  if (!more) { list.sessions.clear(); list.order = []; }
  for (const s of page.items) {
    if (!list.sessions.has(s.id)) list.order.push(s.id);
    list.sessions.set(s.id, s);
  }
  for (const [id, status] of Object.entries(page.statuses || {})) list.statuses.set(id, status);
  list.cursor = page.next_cursor;
  list.loaded = true;
  renderSessions();
}

function matchesFilter(info) {
  if (list.query) return false; // a search's results are the server's; new sessions show when it is cleared
  return !list.directory || info.directory === list.directory;
}

function upsertSession(info) {
  if (!list.sessions.has(info.id)) {
    if (!matchesFilter(info)) return;
    list.order.unshift(info.id);
  }
  list.sessions.set(info.id, info);
  if (!list.query) { // most recently updated first, as the server lists them
    list.order.sort((a, b) => (list.sessions.get(b)?.updated_at ?? 0) - (list.sessions.get(a)?.updated_at ?? 0));
  }
  renderSessions();
}

function renderSessions() {
  if (!list.loaded) return;
  const ul = $('session-list');
  const children = new Map();
  const roots = [];
  for (const id of list.order) {
    const s = list.sessions.get(id);
    if (!s) continue;
    if (s.parent_id && list.sessions.has(s.parent_id)) {
      if (!children.has(s.parent_id)) children.set(s.parent_id, []);
      children.get(s.parent_id).push(s);
    } else roots.push(s);
  }
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.session : null;
  const item = (s) => {
    const status = list.statuses.get(s.id) || 'idle';
    const kids = children.get(s.id) || [];
    const row = el('button', {
      class: 'session-row', type: 'button', 'data-session': s.id,
      'aria-current': current && current.id === s.id ? 'true' : 'false',
      title: s.directory || '',
    },
    el('span', { class: `st ${status}`, title: STATUS_TEXT[status] || status }),
    el('span', { class: 't', text: s.title || 'Untitled session' }),
    el('span', { class: 'm', text: `${ago(s.updated_at)} · ${plural(s.message_count || 0, 'message')}${s.directory ? ' · ' + s.directory.split('/').filter(Boolean).pop() : ''}${status !== 'idle' ? ' · ' + (STATUS_TEXT[status] || status) : ''}` }));
    row.addEventListener('click', () => { location.hash = `#/s/${s.id}`; });
    const li = el('li', { class: 'session-item' }, row);
    if (kids.length) {
      const shown = list.open.has(s.id);
      const toggle = el('button', {
        class: 'expander small', type: 'button', 'aria-expanded': String(shown),
        'aria-label': `${shown ? 'Hide' : 'Show'} ${kids.length} sub-agent session${kids.length > 1 ? 's' : ''}`,
        text: `${shown ? '−' : '+'} ${kids.length}`, 'data-toggle': s.id,
      });
      toggle.addEventListener('click', (event) => {
        event.stopPropagation();
        if (list.open.has(s.id)) list.open.delete(s.id); else list.open.add(s.id);
        renderSessions();
        document.querySelector(`[data-toggle="${s.id}"]`)?.focus();
      });
      li.append(toggle);
      li.classList.add('has-kids'); // the row keeps room for the chip: it never covers the title
      if (shown) li.append(el('ul', { role: 'list' }, kids.map(item)));
    }
    return li;
  };
  ul.replaceChildren(...roots.map(item));
  $('sessions-empty').hidden = roots.length > 0;
  $('sessions-empty').textContent = list.query || list.directory
    ? 'No session matches.'
    : 'No sessions yet: start one with New session, or with tether run in a terminal.';
  $('more-sessions').hidden = !list.cursor || Boolean(list.query);
  const dirs = new Set([...list.sessions.values()].map((s) => s.directory).filter(Boolean));
  $('directories').replaceChildren(...[...dirs].sort().map((d) => el('option', { value: d })));
  if (focused) document.querySelector(`.session-row[data-session="${focused}"]`)?.focus();
}

function setStatus(id, status) {
  list.statuses.set(id, status);
  renderSessions();
  if (current && current.id === id) current.showStatus(status);
}

function followActivity() {
  const source = new EventSource('/events');
  list.feed = source;
  source.onopen = () => connection('live');
  source.onerror = () => {
    connection('down');
    if (source.readyState === EventSource.CLOSED) setTimeout(followActivity, 3000);
  };
  source.onmessage = (frame) => {
    const a = JSON.parse(frame.data);
    if (a.type === 'session_created' || a.type === 'session_updated') {
      upsertSession(a.session);
      if (current && current.id === a.session.id) current.updated(a.session);
    } else if (a.type === 'session_deleted') {
      for (const id of a.deleted) { list.sessions.delete(id); list.statuses.delete(id); }
      renderSessions();
      if (current && a.deleted.includes(current.id)) { location.hash = ''; }
    } else if (a.type === 'status_changed') {
      setStatus(a.session_id, a.status);
    } else if (a.type === 'approval_pending') {
      if (current && current.id === a.root_id) current.approvalCard(a.request);
    } else if (a.type === 'approval_settled') {
      if (current) current.dropApproval(a.call_id);
    } else if (a.type === 'resync') {
      loadSessions().catch((err) => failed(err, 'Could not list the sessions'));
    }
  };
}

window.addEventListener('offline', () => connection('down'));
window.addEventListener('online', () => {
  // back on the network: streams that died while away start again where they stopped (nothing is lost:
  // the server replays what came after the last event seen)
  if (list.feed && list.feed.readyState === EventSource.CLOSED) followActivity();
  if (current) current.reconnect();
});

function connection(state) {
  const footer = $('connection');
  footer.className = `quiet ${state}`;
  $('connection-text').textContent = state === 'live' ? 'connected · live' : 'reconnecting…';
}

// --- one session ----------------------------------------------------------------------------------------------

let current = null;

class SessionView {
  constructor(id) {
    this.id = id;
    this.info = null;
    this.status = 'idle';
    this.lastN = 0;
    this.source = null;
    this.opens = 0;
    this.closed = false;
    this.ready = false; // the tail is read: later entries come by catchUp
    this.catching = null;
    this.liveText = null; // {node, text} the answer streaming now
    this.liveThinking = null;
    this.pending = []; // live blocks waiting for their entry: [seq, node]
    this.approvals = new Map(); // call_id -> card
    this.transcript = new Transcript($('entries'), { api, actions: (entry) => this.entryActions(entry) });
  }

  async open() {
    $('entries').replaceChildren();
    $('live').replaceChildren();
    $('approvals').replaceChildren();
    $('welcome').hidden = true;
    $('session').hidden = false;
    const view = await api('GET', `/sessions/${encodeURIComponent(this.id)}`);
    if (this.closed) return;
    this.id = view.session.id;
    this.updated(view.session);
    upsertSession(view.session); // the row as it is now (a new session's first prompt gave it its title)
    this.showStatus(view.status);
    const page = await api('GET', `/sessions/${encodeURIComponent(this.id)}/entries?tail=${PAGE}&active=false`);
    if (this.closed) return;
    this.transcript.add(page.entries);
    if (this.transcript.first === null) this.transcript.first = page.last_seq + 1;
    this.transcript.last = Math.max(this.transcript.last, page.last_seq);
    $('load-earlier').hidden = this.transcript.first <= 1;
    this.ready = true;
    this.scrollToEnd();
    // follow from just after the last entry read: its live events and every later entry's events
    this.lastN = this.transcript.last * EVENT_SPAN + LIVE_OFFSET - 1;
    this.follow();
    const waiting = await api('GET', `/approvals?session_id=${this.id}`);
    for (const a of waiting.approvals) this.approvalCard(a);
    renderSessions();
  }

  close() {
    this.closed = true;
    if (this.source) this.source.close();
  }

  updated(info) {
    this.info = info;
    $('title').textContent = info.title || 'Untitled session';
    document.title = `${info.title || 'Untitled session'} · tether`;
    const tokens = (info.input_tokens || 0) + (info.output_tokens || 0);
    const bits = [info.directory, info.model, plural(info.message_count || 0, 'message'),
      tokens ? `${tokens.toLocaleString()} tokens` : null, Number(info.cost) ? `$${Number(info.cost).toFixed(4)}` : null];
    if (info.parent_id) bits.unshift(`sub-agent of ${info.parent_id.slice(0, 12)}`);
    if (info.forked_from) bits.unshift(`fork of ${info.forked_from.slice(0, 12)} at #${info.forked_at}`);
    $('meta').textContent = bits.filter(Boolean).join(' · ');
    if (this.ready && info.entry_count > this.transcript.last) this.catchUp();
  }

  showStatus(status) {
    this.status = status;
    // a run with a call that waits for an answer here waits for approval, whichever feed said what first
    if (status === 'running' && this.approvals.size) status = 'waiting_for_approval';
    const badge = $('status');
    badge.className = `badge ${status}`;
    badge.textContent = STATUS_TEXT[status] || status;
    $('cancel').disabled = !['running', 'queued', 'waiting_for_approval'].includes(status);
    for (const b of document.querySelectorAll('.entry-actions .revert')) b.disabled = status !== 'idle' && status !== 'paused';
  }

  follow() {
    // EventSource reconnects by itself and sends Last-Event-ID; `after` is only for the first connection
    const source = new EventSource(`/sessions/${encodeURIComponent(this.id)}/events?after=${this.lastN}`);
    this.source = source;
    source.onopen = () => { // (counted on the section, for whoever wants to know the stream came back)
      if (!this.closed) $('session').dataset.streamOpens = String(++this.opens);
    };
    source.onmessage = (frame) => {
      const event = JSON.parse(frame.data);
      if (event.session_id === this.id) {
        if (event.n <= this.lastN) return; // seen before a reconnect
        this.lastN = event.n;
      }
      this.handle(event);
    };
    source.onerror = () => {
      if (this.closed) return;
      if (source.readyState === EventSource.CLOSED) { // the server refused: start again where we were
        setTimeout(() => { if (!this.closed && this.source === source) this.follow(); }, 2000);
      }
    };
  }

  reconnect() {
    if (this.closed) return;
    if (this.source) this.source.close();
    this.follow();
    this.catchUp();
  }

  handle(event) {
    const own = event.session_id === this.id;
    const durable = (event.n % EVENT_SPAN) < LIVE_OFFSET;
    if (!own) { // a sub-agent's event: say what it does, its journal is its own session's
      if (event.type === 'tool_call_start') this.line(`sub-agent: ${event.name} ${oneLine(keyArgument(event.arguments), 80)}`);
      else if (event.type === 'approval_requested') this.approvalCard({ ...event, tool: event.name, session_id: event.session_id });
      else if (event.type === 'approval_resolved') this.dropApproval(event.call_id);
      return;
    }
    switch (event.type) {
      case 'run_started':
        this.showStatus('running');
        $('live').querySelector('.run-error')?.remove();
        this.catchUp();
        break;
      case 'text_delta':
        this.stream('text', event.text);
        break;
      case 'thinking_delta':
        this.stream('thinking', event.text);
        break;
      case 'usage': // one assistant message is journaled: what streamed is now its entry
        this.settleLive(Math.floor(event.n / EVENT_SPAN));
        this.catchUp();
        break;
      case 'progress':
        this.line(`${event.what}${event.detail ? ': ' + event.detail : ''}${event.total ? ` (${event.done ?? 0}/${event.total})` : ''}`);
        break;
      case 'rlm_progress':
        this.line(`RLM ${event.stage}${event.detail ? ': ' + oneLine(event.detail, 100) : ''}`);
        break;
      case 'compaction_started':
        this.line(`Compacting the context (${event.reason}, ${event.tokens_before} tokens)…`);
        break;
      case 'compaction_failed':
        this.line(`Compaction failed: ${event.error}`);
        break;
      case 'approval_requested':
        this.approvalCard({ ...event, tool: event.name, session_id: this.id });
        this.catchUp();
        break;
      case 'approval_resolved':
        this.dropApproval(event.call_id);
        this.catchUp();
        break;
      case 'done':
        this.endRun();
        break;
      case 'error':
        this.endRun();
        $('live').append(el('div', { class: 'run-error', role: 'status', text: event.code === 'cancelled' ? 'The run was cancelled.' : `The run failed (${event.code}): ${event.message}` }));
        break;
      default:
        if (durable) this.catchUp();
    }
  }

  endRun() {
    this.settleLive(Infinity);
    this.line(null);
    this.catchUp().then(() => api('GET', `/sessions/${encodeURIComponent(this.id)}`)).then((view) => {
      if (this.closed) return;
      this.updated(view.session);
      upsertSession(view.session);
      setStatus(this.id, view.status); // the feed does not say it when a run was cancelled
    }).catch(() => {});
  }

  stream(kind, text) {
    const stick = this.nearEnd();
    let box = kind === 'text' ? this.liveText : this.liveThinking;
    if (!box) {
      const node = kind === 'text'
        ? el('div', { class: 'live-block assistant' }, el('div', { class: 'who', text: 'Agent' }), el('div', { class: 'md cursor' }))
        : el('details', { class: 'thinking live-block' }, el('summary', {}, 'Thinking…'), el('div', { class: 'thought' }));
      box = { node, text: '', drawn: false };
      $('live').append(node);
      if (kind === 'text') this.liveText = box; else this.liveThinking = box;
    }
    box.text += text;
    if (!box.drawn) {
      box.drawn = true;
      requestAnimationFrame(() => {
        box.drawn = false;
        if (kind === 'text') {
          const md = markdown(box.text);
          md.classList.add('cursor');
          box.node.lastChild.replaceWith(md);
        } else box.node.lastChild.textContent = box.text;
        if (stick) this.scrollToEnd();
      });
    }
  }

  settleLive(seq) {
    for (const box of [this.liveText, this.liveThinking]) if (box) this.pending.push([seq, box.node]);
    this.liveText = null;
    this.liveThinking = null;
    this.dropSettled();
  }

  dropSettled() {
    this.pending = this.pending.filter(([seq, node]) => {
      if (seq <= this.transcript.last || seq === Infinity) { node.remove(); return false; }
      return true;
    });
  }

  line(text) {
    let node = $('live').querySelector('.live-line');
    if (text === null) { node?.remove(); return; }
    if (!node) { node = el('div', { class: 'live-line' }); $('live').append(node); }
    node.textContent = text;
  }

  /** Read the entries after the last one shown, until there are none (one reader at a time). */
  catchUp() {
    if (this.catching) { this.again = true; return this.catching; }
    this.catching = (async () => {
      do {
        this.again = false;
        for (;;) {
          const start = this.transcript.last + 1;
          const page = await api('GET', `/sessions/${encodeURIComponent(this.id)}/entries?start=${start}&limit=200`);
          if (this.closed || !page.entries.length) break;
          const stick = this.nearEnd();
          this.transcript.add(page.entries);
          for (const e of page.entries) this.afterEntry(e);
          this.dropSettled();
          if (stick) this.scrollToEnd();
          if (this.transcript.last >= page.last_seq) break;
        }
      } while (this.again && !this.closed);
    })().catch((err) => { if (!this.closed) failed(err, 'Could not read the session'); })
      .finally(() => { this.catching = null; });
    return this.catching;
  }

  afterEntry(entry) {
    const b = entry.body;
    if (b.kind === 'marker' && b.name === 'approval_decision' && b.data) this.dropApproval(b.data.call_id);
    if (b.kind === 'revert') this.transcript.markReverted();
  }

  async loadEarlier() {
    const first = this.transcript.first;
    if (this.loadingEarlier || first === null || first <= 1) return;
    this.loadingEarlier = true;
    const box = $('transcript');
    try {
      const start = Math.max(1, first - PAGE);
      const page = await api('GET', `/sessions/${encodeURIComponent(this.id)}/entries?start=${start}&end=${first - 1}&limit=${PAGE}`);
      if (this.closed) return;
      const before = box.scrollHeight;
      this.transcript.add(page.entries, { prepend: true });
      this.transcript.first = start;
      box.scrollTop += box.scrollHeight - before; // what was on screen stays there
      $('load-earlier').hidden = start <= 1;
    } catch (err) {
      failed(err, 'Could not read earlier messages');
    } finally {
      this.loadingEarlier = false;
    }
  }

  nearEnd() {
    const box = $('transcript');
    return box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  }

  scrollToEnd() {
    const box = $('transcript');
    box.scrollTop = box.scrollHeight;
  }

  entryActions(entry) {
    const fork = el('button', { type: 'button', class: 'fork-here', title: `A new session with entries 1–${entry.seq}`, text: 'Fork from here' });
    fork.addEventListener('click', () => this.fork(entry.seq));
    const revert = el('button', { type: 'button', class: 'revert', title: `Hide every entry after #${entry.seq} from the agent (kept in the journal)`, text: 'Revert to here' });
    revert.disabled = this.status !== 'idle' && this.status !== 'paused';
    revert.addEventListener('click', async () => {
      if (revert.dataset.armed !== 'yes') {
        revert.dataset.armed = 'yes';
        revert.textContent = 'Click again to revert';
        revert.classList.add('danger');
        setTimeout(() => { revert.dataset.armed = ''; revert.textContent = 'Revert to here'; revert.classList.remove('danger'); }, 4000);
        return;
      }
      revert.disabled = true;
      try {
        await api('POST', `/sessions/${encodeURIComponent(this.id)}/revert`, { to_seq: entry.seq, reason: 'reverted from the web page' });
        toast(`Reverted to #${entry.seq}`);
        await this.catchUp();
      } catch (err) { failed(err, 'Could not revert'); revert.disabled = false; }
    });
    return [fork, revert];
  }

  async fork(at) {
    try {
      const info = await api('POST', `/sessions/${encodeURIComponent(this.id)}/fork`, at === undefined ? {} : { at });
      upsertSession(info);
      toast(at === undefined ? 'Forked the session' : `Forked at #${at}`);
      location.hash = `#/s/${info.id}`;
    } catch (err) { failed(err, 'Could not fork'); }
  }

  approvalCard(a) {
    if (this.approvals.has(a.call_id)) return;
    this.transcript.asking(a.call_id);
    const message = el('input', { type: 'text', placeholder: 'Tell the agent what to do instead (optional)', 'aria-label': 'Message with a denial' });
    const answer = async (approved, scope) => {
      for (const b of card.querySelectorAll('button')) b.disabled = true;
      try {
        await api('POST', `/sessions/${encodeURIComponent(a.session_id)}/approvals/${encodeURIComponent(a.call_id)}`,
          { approved, scope, message: approved ? '' : message.value });
        this.dropApproval(a.call_id);
      } catch (err) {
        failed(err, 'Could not answer');
        for (const b of card.querySelectorAll('button')) b.disabled = false;
      }
    };
    message.addEventListener('keydown', (event) => { if (event.key === 'Enter') { event.preventDefault(); answer(false, 'once'); } });
    const rules = (a.suggestion || []).join(', ');
    const card = el('div', { class: 'approval', role: 'group', 'aria-label': `Approve ${a.tool}`, 'data-call': a.call_id },
      el('h3', {}, `${a.tool} wants to run`, a.session_id !== this.id ? el('span', { class: 'quiet', text: ' (sub-agent)' }) : null),
      a.reason ? el('p', { class: 'reason', text: a.reason }) : null,
      el('pre', { class: 'text', text: pretty(a.arguments) }),
      el('div', { class: 'row' },
        el('button', { type: 'button', class: 'primary approve', text: 'Allow once', onclick: () => answer(true, 'once') }),
        el('button', { type: 'button', class: 'always', text: 'Always allow', title: rules ? `Adds: ${rules} (this session)` : 'Calls like this one, in this session', onclick: () => answer(true, 'session') }),
        message,
        el('button', { type: 'button', class: 'danger-ghost deny', text: 'Deny', onclick: () => answer(false, 'once') })));
    this.approvals.set(a.call_id, card);
    $('approvals').append(card);
    this.showStatus(this.status);
    this.scrollToEnd();
  }

  dropApproval(callId) {
    const card = this.approvals.get(callId);
    if (!card) return;
    card.remove();
    this.approvals.delete(callId);
    if (this.status === 'waiting_for_approval' && !this.approvals.size) this.status = 'running'; // it goes on
    this.showStatus(this.status);
  }
}

async function openSession(id) {
  if (current && current.id === id) return;
  if (current) current.close();
  if (!id) {
    current = null;
    $('session').hidden = true;
    $('welcome').hidden = false;
    document.title = 'tether';
    renderSessions();
    return;
  }
  current = new SessionView(id);
  try {
    await current.open();
  } catch (err) {
    failed(err, 'Could not open the session');
  }
}

function route() {
  if (new URLSearchParams(location.hash.slice(1)).get('token')) { // a signed-in link pasted into this tab
    authenticate().then((ok) => {
      if (!ok) return;
      if ($('token-dialog').open) $('token-dialog').close();
      signingIn = null;
      start();
    });
    return;
  }
  const match = /^#\/s\/([^/?#]+)/.exec(location.hash);
  openSession(match ? decodeURIComponent(match[1]) : null);
}

// --- the controls ----------------------------------------------------------------------------------------------

async function send() {
  const box = $('prompt');
  const text = box.value.trim();
  if (!text || !current) return;
  $('send').disabled = true;
  try {
    const accepted = await api('POST', `/sessions/${encodeURIComponent(current.id)}/prompt`, { prompt: text });
    box.value = '';
    if (accepted.queued) toast('Queued: it runs after the run in progress');
    current.showStatus(accepted.queued ? current.status : 'running');
  } catch (err) {
    failed(err, 'Could not send');
  } finally {
    $('send').disabled = false;
    box.focus();
  }
}

async function cancel() {
  if (!current) return;
  try {
    const outcome = await api('POST', `/sessions/${encodeURIComponent(current.id)}/cancel`);
    if (!outcome.done) toast('There was no run to cancel');
  } catch (err) { failed(err, 'Could not cancel'); }
}

async function createSession(event) {
  event.preventDefault();
  const directory = $('new-directory').value.trim();
  const prompt = $('new-prompt').value.trim();
  try {
    const created = await api('POST', '/sessions', prompt ? { directory, prompt } : { directory });
    $('new-dialog').close();
    $('new-prompt').value = '';
    upsertSession(created.session);
    location.hash = `#/s/${created.session.id}`;
  } catch (err) { failed(err, 'Could not create the session'); }
}

async function share(event) {
  event.preventDefault();
  if (!current) return;
  const seconds = $('share-expiry').value;
  $('share-create').disabled = true;
  try {
    const link = await api('POST', `/sessions/${encodeURIComponent(current.id)}/shares`, { expires_in: seconds ? Number(seconds) : null });
    const url = new URL(link.url, location.origin).href;
    $('share-url').value = url;
    $('share-expires').textContent = link.expires_at ? `Expires ${new Date(link.expires_at * 1000).toLocaleString()}.` : 'Never expires; revoke it when it has served.';
    $('share-result').hidden = false;
    $('share-copy').hidden = false;
    $('share-url').select();
    $('share-url').focus();
  } catch (err) {
    failed(err, 'Could not create a link');
  } finally {
    $('share-create').disabled = false;
  }
}

function openShare() {
  $('share-result').hidden = true;
  $('share-copy').hidden = true;
  $('share-dialog').showModal();
}

function openNew() {
  $('new-directory').value = list.directory || current?.info?.directory || $('new-directory').value || '';
  $('new-dialog').showModal();
  ($('new-directory').value ? $('new-prompt') : $('new-directory')).focus();
}

function typing(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName));
}

let searchTimer = null;

function wire() {
  $('composer').addEventListener('submit', (event) => { event.preventDefault(); send(); });
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) { event.preventDefault(); send(); }
    if (event.key === 'Escape') $('prompt').blur();
  });
  $('cancel').addEventListener('click', cancel);
  $('fork').addEventListener('click', () => current && current.fork(undefined));
  $('share').addEventListener('click', openShare);
  $('share-form').addEventListener('submit', share);
  $('share-copy').addEventListener('click', async () => {
    try { await navigator.clipboard.writeText($('share-url').value); toast('Link copied'); } catch { $('share-url').select(); }
  });
  $('new-session').addEventListener('click', openNew);
  $('new-form').addEventListener('submit', createSession);
  $('new-prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); $('new-form').requestSubmit(); }
  });
  for (const button of document.querySelectorAll('dialog [data-close]')) {
    button.addEventListener('click', () => button.closest('dialog').close());
  }
  $('load-earlier').addEventListener('click', () => current && current.loadEarlier());
  $('transcript').addEventListener('scroll', () => {
    if (current && $('transcript').scrollTop < 300) current.loadEarlier();
  }, { passive: true });
  $('more-sessions').addEventListener('click', () => loadSessions(true).catch((err) => failed(err, 'Could not list')));
  $('search').addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      list.query = $('search').value.trim();
      loadSessions().catch((err) => failed(err, 'Could not search'));
    }, 250);
  });
  $('directory').addEventListener('change', () => {
    list.directory = $('directory').value.trim();
    loadSessions().catch((err) => failed(err, 'Could not list'));
  });
  document.addEventListener('keydown', (event) => {
    if (typing(event.target) || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === '/') { event.preventDefault(); $('search').focus(); }
    else if (event.key === 'n') { event.preventDefault(); openNew(); }
  });
  window.addEventListener('hashchange', route);
}

async function start() {
  try {
    await loadSessions();
  } catch (err) {
    if (err.status !== 401) failed(err, 'Could not list the sessions');
    return;
  }
  if (!list.feed) followActivity();
  route();
}

async function main() {
  wire();
  if (await authenticate()) start();
}

main();
