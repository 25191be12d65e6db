// The HTTP API client: bearer token, JSON requests, errors, the live event stream.

const TOKEN_KEY = 'quasched.token';
export const BASE = '/api/v1';

/** Event kinds the stream sends (``event: <kind>``); EventSource only delivers named events we listen to. */
export const EVENT_KINDS = [
  'submitted', 'started', 'stopping', 'succeeded', 'failed', 'cancelled', 'preempting', 'preempted', 'evicted',
  'migrated', 'requeued', 'node-added', 'node-removed', 'node-cordoned', 'node-uncordoned',
  'device-healthy', 'device-unhealthy', 'role',
];

/** Move a token from the URL fragment ``#token=...`` to localStorage and strip it from the address bar. */
export function takeTokenFromUrl() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get('token');
  if (!token) return false;
  setToken(token);
  params.delete('token');
  const rest = params.toString();
  history.replaceState(null, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
  return true;
}

export function getToken() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

export function setToken(token) {
  try { localStorage.setItem(TOKEN_KEY, token.trim()); } catch { /* private mode: session only */ }
}

export function clearToken() {
  try { localStorage.removeItem(TOKEN_KEY); } catch { /* ignore */ }
}

/** A non-2xx reply. ``detail`` is FastAPI's: a string, or a list of ``{loc, msg}``. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(typeof detail === 'string' ? detail : `HTTP ${status}`);
    this.status = status;
    this.detail = detail;
  }

  /** ``{field: message}`` of a validation error (``loc`` = ["body", field, ...]); "_form" for the rest. */
  fieldErrors() {
    const out = {};
    if (!Array.isArray(this.detail)) {
      out._form = typeof this.detail === 'string' ? this.detail : this.message;
      return out;
    }
    for (const err of this.detail) {
      const loc = Array.isArray(err.loc) ? err.loc : [];
      const field = loc[0] === 'body' && loc.length > 1 ? String(loc[1]) : '_form';
      const msg = String(err.msg ?? 'invalid').replace(/^Value error, /, '');
      out[field] = out[field] ? `${out[field]}; ${msg}` : msg;
    }
    return out;
  }
}

/** ``fetch`` a JSON endpoint under /api/v1 with the bearer token. */
export async function api(path, { method = 'GET', body } = {}) {
  const headers = { Accept: 'application/json' };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(BASE + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store',
  });
  if (res.status === 204) return null;
  let data = null;
  const text = await res.text();
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!res.ok) throw new ApiError(res.status, data && data.detail !== undefined ? data.detail : (data || res.statusText));
  return data;
}

/**
 * Follow a job's log (``GET /jobs/{id}/logs?follow=true``): ``onText(chunk)`` for each piece as the job writes
 * it; resolves with "ended" when the job has ended, "none" when it runs no command here. ``signal`` aborts.
 */
export async function followLog(id, tail, onText, signal) {
  const headers = {};
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(`${BASE}/jobs/${id}/logs?follow=true&tail=${tail}`, { headers, signal, cache: 'no-store' });
  if (res.status === 404) return 'none';
  if (!res.ok) throw new ApiError(res.status, res.statusText);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    onText(decoder.decode(value, { stream: true }));
  }
  return 'ended';
}

/**
 * Subscribe to ``GET /stream`` (token as ``?token=``: EventSource cannot send headers).
 * ``onEvent(kind, event)`` for every event; ``onState("live"|"connecting"|"off")``.
 */
export function openStream(onEvent, onState) {
  const token = getToken();
  if (!token || typeof EventSource === 'undefined') { onState('off'); return null; }
  const source = new EventSource(`${BASE}/stream?token=${encodeURIComponent(token)}`);
  const handle = (e) => {
    let data = null;
    try { data = JSON.parse(e.data); } catch { /* keep null */ }
    onEvent(e.type === 'message' ? (data && data.kind) || 'message' : e.type, data);
  };
  for (const kind of EVENT_KINDS) source.addEventListener(kind, handle);
  source.onmessage = handle;
  source.onopen = () => onState('live');
  source.onerror = () => onState(source.readyState === EventSource.CLOSED ? 'off' : 'connecting');
  onState('connecting');
  return source;
}
