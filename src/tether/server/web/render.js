// How journal entries look: Markdown (marked, then DOMPurify: a transcript is untrusted text), tool calls
// with their arguments and output (as text, never as HTML), edit diffs, thinking, and the markers of
// compactions, reverts, titles, checkpoints and approvals. Builds DOM nodes; knows nothing of the network.
import { marked } from './vendor/marked.esm.js';
import DOMPurify from './vendor/purify.es.mjs';

marked.setOptions({ gfm: true, breaks: false });
// HTML written in a transcript is shown as the text it is, never parsed: Markdown's own elements only
// (DOMPurify then removes what Markdown itself can carry, such as a javascript: link)
marked.use({ renderer: { html: ({ text }) => escapeHtml(text) } });

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

const PURIFY = {
  FORBID_TAGS: ['img', 'style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'svg', 'math', 'video', 'audio', 'picture', 'source'],
  FORBID_ATTR: ['style', 'class', 'id'],
  ALLOW_DATA_ATTR: false,
};

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Markdown as sanitized DOM: a fragment of safe elements (no script, no handlers, no styles, no images). */
export function markdown(text) {
  const box = el('div', { class: 'md' });
  const html = marked.parse(text || '', { async: false });
  box.append(DOMPurify.sanitize(html, { ...PURIFY, RETURN_DOM_FRAGMENT: true }));
  return box;
}

export function textPre(text, cls = 'text') {
  return el('pre', { class: cls, text: text ?? '' });
}

export function pretty(value) {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  try { return JSON.stringify(value, null, 2); } catch { return String(value); }
}

/** A unified diff, line by line, coloured by what each line does (text only). */
export function diffView(diff) {
  const pre = el('pre', { class: 'diff' });
  for (const line of diff.replace(/\n$/, '').split('\n')) {
    let cls = '';
    if (line.startsWith('+++') || line.startsWith('---')) cls = 'hunk';
    else if (line.startsWith('@@')) cls = 'hunk';
    else if (line.startsWith('+')) cls = 'add';
    else if (line.startsWith('-')) cls = 'del';
    pre.append(el('span', { class: cls, text: line || ' ' }));
  }
  return pre;
}

/** The diff an edit's arguments describe, before its result (with its real diff) comes. */
export function argumentDiff(args) {
  const old = String(args.old_string ?? '');
  const neu = String(args.new_string ?? '');
  const lines = [`--- ${args.path ?? ''}`, `+++ ${args.path ?? ''}`];
  for (const l of old.split('\n')) lines.push('-' + l);
  for (const l of neu.split('\n')) lines.push('+' + l);
  return diffView(lines.join('\n'));
}

/** The one argument that says what a call does (a path, a command, a pattern), for its summary line. */
export function keyArgument(args) {
  if (args === null || args === undefined) return '';
  if (typeof args !== 'object') return String(args);
  for (const key of ['path', 'file_path', 'command', 'cmd', 'pattern', 'query', 'url', 'description', 'prompt', 'what']) {
    if (typeof args[key] === 'string' && args[key]) return args[key];
  }
  const first = Object.values(args).find((v) => typeof v === 'string');
  return first ?? JSON.stringify(args);
}

export function oneLine(text, limit = 140) {
  const line = String(text ?? '').trim().split('\n')[0];
  return line.length > limit ? line.slice(0, limit - 1) + '…' : line;
}

export function ago(seconds) {
  const d = Date.now() / 1000 - seconds;
  if (d < 45) return 'just now';
  if (d < 3600) return `${Math.round(d / 60)}m ago`;
  if (d < 86400) return `${Math.round(d / 3600)}h ago`;
  if (d < 86400 * 30) return `${Math.round(d / 86400)}d ago`;
  return new Date(seconds * 1000).toLocaleDateString();
}

export function textOf(message) {
  return (message.parts || []).filter((p) => p.kind === 'text').map((p) => p.text).join('');
}

export const STATUS_TEXT = {
  idle: 'idle', queued: 'queued', running: 'running', waiting_for_approval: 'waiting for approval',
  paused: 'paused', busy_elsewhere: 'running elsewhere',
};
