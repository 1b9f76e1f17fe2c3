// A session's transcript: journal entries rendered in order (each seq once), tool results attached to
// their calls, reverted spans dimmed, child (sub-agent) runs opened in place. Pages: the tail first, earlier
// entries prepended on demand, so a session of 10,000 messages costs what is on screen.
import {
  el, markdown, textPre, pretty, diffView, argumentDiff, keyArgument, oneLine, textOf,
} from './render.js';

const APPROVAL_REQUEST = 'approval_request';
const APPROVAL_DECISION = 'approval_decision';

export class Transcript {
  /**
   * @param list the <ol> entries go into
   * @param options.api the fetch helper; options.actions(entry) buttons for an entry (none: read-only)
   */
  constructor(list, { api, actions = null, nested = false } = {}) {
    this.list = list;
    this.api = api;
    this.actions = actions;
    this.nested = nested;
    this.seqs = new Set();
    this.calls = new Map(); // call_id -> {details, state, body, name, args}
    this.orphans = new Map(); // call_id -> {item, result}: a result whose call is on a page not read yet
    this.reverts = []; // [to_seq, at]
    this.first = null;
    this.last = 0;
  }

  /** Render entries (in order) at the end, or at the start when `prepend` (an earlier page). */
  add(entries, { prepend = false } = {}) {
    const fresh = entries.filter((e) => !this.seqs.has(e.seq));
    if (!fresh.length) return [];
    const nodes = [];
    for (const entry of fresh) {
      this.seqs.add(entry.seq);
      if (entry.body.kind === 'revert') this.reverts.push([entry.body.to_seq, entry.seq]);
      const node = this.entry(entry);
      if (node) nodes.push(node);
    }
    if (prepend) this.list.prepend(...nodes);
    else this.list.append(...nodes);
    for (const e of fresh) {
      this.first = this.first === null ? e.seq : Math.min(this.first, e.seq);
      this.last = Math.max(this.last, e.seq);
    }
    this.markReverted();
    return fresh;
  }

  markReverted() {
    if (!this.reverts.length) return;
    for (const item of this.list.children) {
      const seq = Number(item.dataset.seq);
      const hidden = this.reverts.some(([to, at]) => seq > to && seq < at);
      item.classList.toggle('reverted', hidden);
    }
  }

  entry(entry) {
    const body = entry.body;
    let item;
    if (body.kind === 'message') item = this.message(entry);
    else item = this.markerItem(entry);
    if (!item) return null;
    item.dataset.seq = entry.seq;
    if (this.actions && body.kind === 'message' && (body.role === 'user' || body.role === 'assistant')) {
      item.append(el('div', { class: 'entry-actions' }, this.actions(entry)));
    }
    return item;
  }

  message(entry) {
    const m = entry.body;
    if (m.role === 'user') {
      const text = textOf(m);
      return el('li', { class: 'entry user' },
        el('div', { class: 'who', text: 'You' }),
        el('div', { class: 'bubble', text: text || '(no text)' }));
    }
    if (m.role === 'system') {
      return el('li', { class: 'entry marker' }, el('span', { class: 'what', text: `system: ${oneLine(textOf(m))}` }));
    }
    if (m.role === 'tool') {
      const loose = [];
      for (const part of m.parts || []) {
        if (part.kind !== 'tool_result') continue;
        const call = this.calls.get(part.call_id);
        if (call) this.result(call, part);
        else {
          const details = this.toolElement(part.call_id, part.name || 'tool', undefined);
          this.result(this.calls.get(part.call_id), part);
          loose.push(details);
          this.orphans.set(part.call_id, details);
        }
      }
      return loose.length ? el('li', { class: 'entry tool' }, loose) : el('li', { class: 'entry tool', hidden: true });
    }
    // assistant
    const item = el('li', { class: 'entry assistant' },
      el('div', { class: 'who' }, 'Agent', m.model ? el('span', { class: 'model', text: ` · ${m.model}` }) : null));
    for (const part of m.parts || []) {
      if (part.kind === 'thinking' && (part.text || part.redacted)) {
        item.append(el('details', { class: 'thinking' },
          el('summary', {}, 'Thinking'),
          el('div', { class: 'thought', text: part.text || '(redacted)' })));
      } else if (part.kind === 'text' && part.text) {
        item.append(markdown(part.text));
      } else if (part.kind === 'tool_call') {
        const orphan = this.orphans.get(part.id);
        if (orphan) { // its result came on a later page: bring it here
          this.orphans.delete(part.id);
          const call = this.calls.get(part.id);
          orphan.remove();
          call.name = part.name;
          call.details.querySelector('.tool-name').textContent = part.name;
          this.fillArguments(call, part.arguments);
          item.append(call.details);
        } else {
          item.append(this.toolElement(part.id, part.name, part.arguments));
        }
      }
    }
    const cut = cutReason(m);
    if (cut) item.append(el('div', { class: 'cut-note', text: `[${cut}]` }));
    return item;
  }

  toolElement(callId, name, args) {
    const state = el('span', { class: 'tool-state running', text: 'running' });
    const argLine = el('span', { class: 'tool-arg' });
    const body = el('div', { class: 'tool-body' });
    const output = el('div', { class: 'tool-output' });
    const details = el('details', { class: 'tool', 'data-call': callId },
      el('summary', {}, el('span', { class: 'tool-name', text: name }), argLine, state), body);
    const call = { details, state, body, output, argLine, name, args, done: false };
    this.calls.set(callId, call);
    body.append(el('div', { class: 'tool-arguments' }), output);
    if (args !== undefined) this.fillArguments(call, args);
    return details;
  }

  fillArguments(call, args) {
    call.args = args;
    call.argLine.textContent = oneLine(keyArgument(args), 160);
    const box = call.body.querySelector('.tool-arguments');
    box.replaceChildren(el('div', { class: 'label', text: 'Arguments' }), textPre(pretty(args)));
    if (!call.done && args && typeof args === 'object' && 'old_string' in args && 'new_string' in args) {
      call.output.replaceChildren(el('div', { class: 'label', text: 'Change' }), argumentDiff(args));
    }
  }

  /** What a person was asked about a call, and what they answered, in the call's own element: a word in its
   * line (asked, allowed, denied) and the whole sentence in its body. */
  noteApproval(call, text, kind) {
    let box = call.body.querySelector(':scope > .approval-notes');
    if (!box) { box = el('div', { class: 'approval-notes' }); call.body.prepend(box); }
    box.append(el('div', { class: `approval-note ${kind}`, text }));
    let chip = call.details.querySelector('summary .tool-approval');
    if (!chip) { chip = el('span', { class: 'tool-approval' }); call.details.querySelector('summary').append(chip); }
    chip.textContent = kind;
  }

  /** Mark a call as asking a person (an approval request waits on it). */
  asking(callId) {
    const call = this.calls.get(callId);
    if (call && !call.done) { call.state.className = 'tool-state asking'; call.state.textContent = 'needs approval'; }
  }

  result(call, part) {
    call.done = true;
    const meta = part.metadata || {};
    const denied = meta.error === 'denied';
    call.state.className = `tool-state ${denied ? 'denied' : part.is_error ? 'error' : 'ok'}`;
    const seconds = typeof meta.duration === 'number' ? ` · ${meta.duration < 1 ? Math.round(meta.duration * 1000) + ' ms' : meta.duration.toFixed(1) + ' s'}` : '';
    call.state.textContent = (denied ? 'denied' : part.is_error ? 'failed' : 'done') + seconds;
    const out = [];
    if (typeof meta.diff === 'string' && meta.diff) {
      out.push(el('div', { class: 'label', text: 'Diff' }), diffView(meta.diff));
    }
    out.push(el('div', { class: 'label', text: part.is_error ? 'Error' : 'Output' }), textPre(part.content));
    if (typeof meta.child_id === 'string') out.push(this.childRun(meta.child_id));
    call.output.replaceChildren(...out);
  }

  /** A sub-agent's run, read when opened, nested under the call that started it (read-only). */
  childRun(childId) {
    const box = el('div', { class: 'child' });
    const list = el('ol');
    const button = el('button', { class: 'ghost small', type: 'button', text: 'Show the sub-agent run' });
    button.addEventListener('click', async () => {
      button.disabled = true;
      try {
        const page = await this.api('GET', `/sessions/${encodeURIComponent(childId)}/entries?tail=200&active=false`);
        const nested = new Transcript(list, { api: this.api, nested: true });
        nested.add(page.entries);
        for (const call of nested.calls.values()) if (!call.done) { call.state.className = 'tool-state'; call.state.textContent = ''; }
        button.remove();
      } catch (err) {
        button.disabled = false;
        button.textContent = `Could not read the sub-agent run (${err.message}); try again`;
      }
    });
    box.append(el('div', { class: 'label', text: `Sub-agent session ${childId}` }), button, list);
    return box;
  }

  markerItem(entry) {
    const b = entry.body; // (fields at their default are left out of the JSON)
    let text;
    let cls = 'entry marker';
    let extra = null;
    if (b.kind === 'revert') {
      text = `Reverted to #${b.to_seq}${b.reason ? `: ${b.reason}` : ''}`;
      cls += ' revert';
    } else if (b.kind === 'title') {
      text = `Title: ${b.title}`;
    } else if (b.kind === 'checkpoint') {
      text = `Checkpoint after ${b.steps ?? 0} steps (${(b.reason ?? 'step_limit').replace('_', ' ')})${b.next_action ? ` · next: ${oneLine(b.next_action, 100)}` : ''}`;
    } else if (b.kind === 'compaction') {
      const tokens = b.tokens_before ? ` · ${b.tokens_before} → ${b.tokens_after ?? '?'} tokens` : '';
      text = `Compacted (${b.strategy ?? 'model'})${tokens} · kept from #${b.first_kept_seq}`;
      cls += ' compaction';
      extra = el('details', { class: 'summary' }, el('summary', {}, 'Summary'), el('div', { class: 'tool-body' }, markdown(b.summary)));
    } else if (b.kind === 'marker') {
      const d = b.data || {};
      if (b.name === APPROVAL_REQUEST || b.name === APPROVAL_DECISION) {
        let kind = 'asked';
        if (b.name === APPROVAL_REQUEST) {
          text = `Asked before ${d.tool ?? 'a tool'}${d.reason ? `: ${oneLine(d.reason, 100)}` : ''}`;
          if (typeof d.call_id === 'string') this.asking(d.call_id);
        } else {
          const who = d.by ? ` by ${d.by}` : '';
          text = d.approved ? `Allowed${who} (${d.scope ?? 'once'})` : `Denied${who}${d.message ? `: ${oneLine(d.message, 100)}` : ''}`;
          kind = d.approved ? 'allowed' : 'denied';
        }
        // in its place: with the call it decided on, when that call is on the page
        const call = typeof d.call_id === 'string' ? this.calls.get(d.call_id) : undefined;
        if (call) {
          this.noteApproval(call, text, kind);
          return el('li', { class: 'entry', hidden: true });
        }
      } else if (b.name === 'interrupted') {
        text = 'The run stopped before it answered';
      } else {
        return el('li', { class: 'entry', hidden: true });
      }
    } else {
      return el('li', { class: 'entry', hidden: true });
    }
    if (!extra) return el('li', { class: cls }, el('span', { class: 'what', text }));
    return el('li', { class: 'entry' }, el('div', { class: cls.replace('entry ', '') }, el('span', { class: 'what', text })), extra);
  }
}

/** Why an assistant message stops short (as `tether.messages.cut_reason` says it), or null. */
function cutReason(m) {
  const meta = m.metadata || {};
  let why = null;
  if (meta.interrupted === true || m.finish_reason === 'interrupted') why = 'interrupted: tether stopped while the model was answering';
  else if (m.finish_reason === 'cancelled') why = 'cancelled while the model was answering';
  else if (m.finish_reason === 'length') why = 'cut off at the output limit';
  if (!why) return null;
  for (const c of Array.isArray(meta.cut_calls) ? meta.cut_calls : []) why += `; a call to ${c && c.name ? c.name : 'tool'} was cut mid-arguments`;
  return why;
}
