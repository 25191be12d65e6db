// The dashboard: token, tabs, throttled refresh driven by the live stream, and the wiring of the views.

import { api, ApiError, clearToken, followLog, getToken, openStream, setToken, takeTokenFromUrl } from './api.js';
import { lineChart } from './charts.js';
import { detailHtml } from './detail.js';
import { esc, fmtGpus, fmtMiB, fmtNum, fmtPct, FINISHED, freeGpus, since, unusableGpus } from './format.js';
import { finishedRows, pendingRows, runningRows, stateBadge } from './jobs.js';
import { ClusterMap, legendHtml } from './map.js';
import { fillOptions, setupSubmit } from './submit.js';
import { teamsHtml, usageHtml } from './teams.js';

/** At most one refresh per this many ms (≤ 2/s however busy the stream is). */
const MIN_REFRESH_MS = 500;
/** Safety poll when the stream is live / down (events may be missed across reconnects). */
const POLL_LIVE_MS = 30000;
const POLL_DOWN_MS = 5000;
const TRENDS_MS = 5000;
const RECENT = 30;

const $ = (sel) => document.querySelector(sel);

const state = {
  snapshot: null,
  pending: [],
  running: [],
  finished: [],
  jobs: new Map(),      // pending + running by id
  queues: [],
  samples: [],
  tab: 'cluster',
  expanded: new Set(),  // pending ids with their evidence open
  detailId: null,
  detail: null,
  selected: null,       // {node: name, device}
  live: 'off',
};

/** Timings the browser tests read (performance.now() ms). */
const metrics = { firstMapMs: null, mapRenderMs: null, snapshotFetchMs: null, refreshes: 0 };
window.quasched = { state, metrics };

const map = new ClusterMap($('#map-wrap'), $('#map'), $('#map-tip'), {
  onSelect: ({ node, device }) => { state.selected = { node: node.name, device }; renderNodePanel(); },
});
window.quasched.map = map;

// ------------------------------------------------------------ refresh scheduling
const dirty = new Set();
let timer = null;
let inFlight = false;
let lastRefresh = -Infinity;

/** Mark parts stale ('snapshot', 'jobs', 'queues', 'trends', 'detail') and refresh soon (throttled). */
function invalidate(...parts) {
  parts.forEach((p) => dirty.add(p));
  if (timer || inFlight) return;
  const wait = Math.max(0, lastRefresh + MIN_REFRESH_MS - performance.now());
  timer = setTimeout(flush, wait);
}

async function flush() {
  timer = null;
  inFlight = true;
  lastRefresh = performance.now();
  const parts = new Set(dirty);
  dirty.clear();
  try {
    await refresh(parts);
    metrics.refreshes += 1;
  } catch (err) {
    handleError(err);
  } finally {
    inFlight = false;
    if (dirty.size) invalidate();
  }
}

const ALL = ['snapshot', 'jobs', 'queues', 'trends', 'detail'];

async function refresh(parts) {
  const tasks = [];
  if (parts.has('snapshot')) tasks.push(loadSnapshot());
  if (parts.has('jobs')) tasks.push(loadJobs());
  if (parts.has('queues')) tasks.push(api('/queues').then((q) => { state.queues = q; }));
  if (parts.has('queues')) tasks.push(api('/usage').then((u) => { state.usage = u; }));
  if (parts.has('trends')) tasks.push(loadTrends());
  if (parts.has('detail') && state.detailId != null) tasks.push(loadDetail());
  const results = await Promise.allSettled(tasks);
  const failed = results.find((r) => r.status === 'rejected');
  if (parts.has('snapshot') || parts.has('jobs')) { renderHeader(); renderMap(); renderNodePanel(); }
  if (parts.has('jobs')) renderJobs();
  if (parts.has('queues') || parts.has('snapshot')) { renderTeams(); renderOptions(); }
  if (parts.has('trends')) renderTrends();
  if (parts.has('detail')) renderDetail();
  if (failed) throw failed.reason;
  hideBanner();
}

async function loadSnapshot() {
  const t0 = performance.now();
  state.snapshot = await api('/snapshot');
  metrics.snapshotFetchMs = performance.now() - t0;
}

async function loadJobs() {
  const [pending, running, preempting, stopping, recent] = await Promise.all([
    api('/jobs?state=pending&limit=1000'), api('/jobs?state=running&limit=1000'),
    api('/jobs?state=preempting&limit=1000'), api('/jobs?state=stopping&limit=1000'), api(`/jobs?limit=${RECENT}`),
  ]);
  const pos = (j) => (j.position == null ? Infinity : j.position);
  state.pending = pending.sort((a, b) => pos(a) - pos(b) || a.id - b.id);
  state.running = [...preempting, ...stopping, ...running].sort((a, b) => b.id - a.id);
  state.finished = recent.filter((j) => FINISHED.has(j.state));
  state.jobs = new Map([...state.pending, ...state.running].map((j) => [j.id, j]));
  for (const j of state.jobs.values()) { seeTime(j.submitted_at); seeTime(j.started_at); }
}

async function loadTrends() {
  const last = state.samples.length ? state.samples[state.samples.length - 1].time : null;
  const fresh = await api(last == null ? '/timeseries' : `/timeseries?since=${last}`);
  state.samples = state.samples.concat(fresh).slice(-4096);
  if (fresh.length) seeTime(fresh[fresh.length - 1].time);
}

async function loadDetail() {
  const id = state.detailId;
  try {
    const job = await api(`/jobs/${id}`);
    if (state.detailId === id) state.detail = job;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) state.detail = { missing: id };
    else throw err;
  }
}

// ------------------------------------------------------------ rendering
/** "Now" on the service's clock: the wall clock, or the newest time seen under a virtual clock. */
let latestTime = 0;
const seeTime = (t) => { if (t != null && t > latestTime) latestTime = t; };
const serverNow = () => (latestTime && latestTime < 1e9 ? latestTime : Date.now() / 1000);

function renderHeader() {
  const s = state.snapshot;
  if (!s) return;
  $('#kpi-nodes').textContent = s.nodes.length.toLocaleString();
  $('#kpi-gpus').textContent = s.gpus.toLocaleString();
  $('#kpi-alloc').textContent = fmtPct(s.gpu_allocation_pct);
  const free = freeGpus(s);
  $('#kpi-free').textContent = free.text;
  $('#kpi-free-box').title = free.title;
  const frag = unusableGpus(s);
  $('#kpi-frag').textContent = frag.text;
  $('#kpi-frag').classList.toggle('muted', frag.quiet);
  $('#kpi-frag-box').title = frag.title;
  $('#kpi-running').textContent = s.running;
  $('#kpi-pending').textContent = s.pending;
  $('#tab-count-jobs').textContent = s.pending ? String(s.pending) : '';
}

function renderMap() {
  if (!state.snapshot || state.tab !== 'cluster') return;
  const t0 = performance.now();
  map.setData(state.snapshot.nodes, state.jobs);
  metrics.mapRenderMs = performance.now() - t0;
  if (metrics.firstMapMs == null) metrics.firstMapMs = performance.now();
  $('#map-legend').innerHTML = legendHtml(map.summary());
  $('#map').dataset.rendered = String(metrics.refreshes + 1);
}

function renderNodePanel() {
  const panel = $('#node-panel');
  const sel = state.selected;
  const node = sel && state.snapshot && state.snapshot.nodes.find((n) => n.name === sel.node);
  if (!node) {
    panel.innerHTML = '<p class="muted">Click a node or GPU on the map to see the jobs running there.</p>';
    return;
  }
  const onNode = (node.jobs || []).map((id) => {
    const j = state.jobs.get(id);
    const devices = j ? j.placement.filter((p) => p.node === node.name).flatMap((p) => p.devices) : [];
    return { id, j, devices };
  });
  const shown = sel.device == null ? onNode : onNode.filter((x) => x.devices.includes(sel.device));
  const live = new Map((node.gpus_live || []).map((g) => [g.device, g]));
  const devices = node.gpu_used_milli.map((u, d) => {
    const bad = node.gpu_healthy[d] === false;
    const g = live.get(d);
    const heat = g && g.temperature_c != null ? `${fmtNum(g.temperature_c)} °C` : '';
    const power = g && g.power_w != null ? `${fmtNum(g.power_w)}${g.power_limit_w ? ` / ${fmtNum(g.power_limit_w)}` : ''} W` : '';
    const flag = bad ? '<span class="bad">unhealthy</span>'
      : g && g.avoided ? `<span class="warn" title="${esc(g.avoided)}">avoided: ${esc(g.avoided)}</span>` : '';
    return `<tr class="${d === sel.device ? 'cur' : ''}"><td><a href="#" data-action="device" data-device="${d}">GPU ${d}</a></td>
      <td class="num">${u}m</td><td><span class="meter"><i style="width:${u / 10}%"></i></span></td>
      <td class="num${g && g.stale ? ' muted" title="stale reading: not trusted' : ''}">${heat}</td>
      <td class="num${g && g.stale ? ' muted' : ''}">${power}</td><td>${flag}</td></tr>`;
  }).join('');
  const jobs = shown.map(({ id, j, devices: ds }) => `<li><a href="#" data-action="open" data-id="${id}">#${id}
      ${j ? esc(j.name) : ''}</a>${j ? ` <span class="muted">${esc(j.team)} · ${fmtGpus(j.gpus)} GPU · GPU ${ds.join(', ')}</span>` : ''}</li>`).join('');
  panel.innerHTML = `<h3>${esc(node.name)}</h3>
    <p class="muted">${esc(node.gpu_model || 'CPU only')} · ${node.gpu_used_milli.length} GPUs
      ${node.cordoned ? ' · <b class="warn">cordoned</b>' : ''}</p>
    <p class="small">CPU ${fmtNum(node.cpu_used_milli / 1000)} / ${fmtNum(node.cpu_milli / 1000)} cores ·
      memory ${fmtMiB(node.memory_used_mib)} / ${fmtMiB(node.memory_mib)}</p>
    ${devices ? `<table class="devices">${devices}</table>` : ''}
    <h4>${sel.device == null ? 'Jobs on this node' : `Jobs on GPU ${sel.device}`}
      ${sel.device == null ? '' : '<a href="#" class="small" data-action="device" data-device="">show all</a>'}</h4>
    ${jobs ? `<ul class="node-jobs">${jobs}</ul>` : '<p class="muted">None.</p>'}`;
}

function renderJobs() {
  const now = serverNow();
  $('#pending-table tbody').innerHTML = pendingRows(state.pending, now, state.expanded);
  $('#running-table tbody').innerHTML = runningRows(state.running, now);
  $('#finished-table tbody').innerHTML = finishedRows(state.finished);
  $('#pending-count').textContent = String(state.pending.length);
  $('#running-count').textContent = String(state.running.length);
  applyArmed();
}

/** Advance the "waiting" / "running for" cells without re-rendering the tables. */
function tickClocks() {
  const now = serverNow();
  for (const el of document.querySelectorAll('[data-since]')) el.textContent = since(Number(el.dataset.since), now);
}

function renderTeams() {
  if (state.tab !== 'teams') return;
  $('#teams').innerHTML = teamsHtml(state.queues);
  $('#usage').innerHTML = usageHtml(state.usage || []);
}

function renderOptions() {
  const models = state.snapshot
    ? [...new Set(state.snapshot.nodes.map((n) => n.gpu_model).filter(Boolean))].sort() : [];
  fillOptions($('#submit-form'), { teams: state.queues.map((q) => q.name), models });
}

function renderTrends() {
  if (state.tab !== 'trends') return;
  const s = state.samples;
  lineChart($('#chart-alloc'), s, { key: 'gpu_allocation_pct', title: 'GPU allocation', unit: '%', color: '#2f6db5', max: 100 });
  lineChart($('#chart-frag'), s, { key: 'fragmentation_pct', title: 'Free GPUs unusable by typical jobs', unit: '%', color: '#e07b1a', max: 100 });
  lineChart($('#chart-queue'), s, { key: 'pending', title: 'Pending jobs', color: '#8e5cb5', digits: 0 });
}

function renderDetail() {
  const drawer = $('#drawer');
  if (state.detailId == null) { drawer.hidden = true; return; }
  drawer.hidden = false;
  const j = state.detail;
  if (!j || (j.id !== state.detailId && j.missing !== state.detailId)) {
    $('#drawer-title').textContent = `Job #${state.detailId}`;
    $('#drawer-body').innerHTML = '<p class="muted">Loading…</p>';
    return;
  }
  if (j.missing) {
    $('#drawer-body').innerHTML = '<p class="muted">No such job.</p>';
    return;
  }
  $('#drawer-title').innerHTML = `#${j.id} ${esc(j.name)} ${stateBadge(j.state)}`;
  $('#drawer-body').innerHTML = detailHtml(j);
  if ((j.command || []).length && (!jobLog || jobLog.id !== j.id)) startLog(j.id);
  renderLog();
  map.setHighlight(j.placement);
  applyArmed();
}

/** The open job's log, followed while the drawer shows it: {id, text, status, abort}. */
let jobLog = null;
const LOG_KEEP = 256 * 1024;

function startLog(id) {
  stopLog();
  const abort = new AbortController();
  const log = { id, text: '', status: 'following', abort };
  jobLog = log;
  followLog(id, 500, (chunk) => {
    log.text = (log.text + chunk).slice(-LOG_KEEP);
    renderLog();
  }, abort.signal).then((end) => { log.status = end; }, (err) => {
    log.status = err.name === 'AbortError' ? 'closed' : `error: ${err.message}`;
  }).finally(renderLog);
}

function stopLog() {
  if (jobLog) jobLog.abort.abort();
  jobLog = null;
}

function renderLog() {
  const el = $('#job-log');
  if (!el || !jobLog || jobLog.id !== state.detailId) return;
  const atEnd = el.scrollTop + el.clientHeight >= el.scrollHeight - 4;
  el.textContent = jobLog.text || (jobLog.status === 'none' ? 'It runs no command on this machine.' : 'No output yet.');
  if (atEnd) el.scrollTop = el.scrollHeight;
  const label = { following: 'following', ended: 'complete', none: '' }[jobLog.status];
  $('#job-log-state').textContent = label ?? jobLog.status;
}

// ------------------------------------------------------------ actions
function openJob(id) {
  state.detailId = id;
  if (!state.detail || state.detail.id !== id) state.detail = null;
  renderDetail();
  invalidate('detail');
}

function closeJob() {
  stopLog();
  state.detailId = null;
  state.detail = null;
  map.setHighlight(null);
  renderDetail();
}

/** The cancel button armed by a first click: {id, until} (kept across table re-renders). */
let armed = null;
const ARM_MS = 4000;

function applyArmed() {
  for (const b of document.querySelectorAll('[data-action="cancel"]')) {
    const on = armed && armed.id === b.dataset.id && performance.now() < armed.until;
    if (!b.dataset.label) b.dataset.label = b.textContent.trim();
    b.classList.toggle('armed', Boolean(on));
    b.textContent = on ? 'Confirm cancel' : b.dataset.label;
  }
}

/** Two-step cancel: the first click arms the button ("Confirm cancel"), a second click within 4 s cancels. */
async function cancelJob(button) {
  if (!(armed && armed.id === button.dataset.id && performance.now() < armed.until)) {
    armed = { id: button.dataset.id, until: performance.now() + ARM_MS };
    applyArmed();
    setTimeout(applyArmed, ARM_MS + 50);
    return;
  }
  armed = null;
  button.disabled = true;
  try {
    await api(`/jobs/${button.dataset.id}/cancel`, { method: 'POST' });
    invalidate(...ALL);
  } catch (err) {
    button.disabled = false;
    showBanner(err instanceof ApiError ? `Cancel failed: ${err.message}` : `Cancel failed: ${err}`, 'action');
  }
}

function selectTab(tab) {
  state.tab = tab;
  try { localStorage.setItem('quasched.tab', tab); } catch { /* ignore */ }
  for (const b of document.querySelectorAll('[role=tab]')) b.setAttribute('aria-selected', String(b.dataset.tab === tab));
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${tab}`;
  if (tab === 'cluster') renderMap();
  if (tab === 'teams') renderTeams();
  if (tab === 'trends') { renderTrends(); invalidate('trends'); }
}

// ------------------------------------------------------------ errors, token, stream
/** A banner: 'refresh' ones go with the next good refresh, 'action' ones (a failed cancel) stay 8 s. */
let bannerTimer = null;
function showBanner(text, kind = 'refresh') {
  const b = $('#banner');
  b.textContent = text;
  b.dataset.kind = kind;
  b.hidden = false;
  clearTimeout(bannerTimer);
  if (kind === 'action') bannerTimer = setTimeout(() => { b.hidden = true; }, 8000);
}

function hideBanner() {
  const b = $('#banner');
  if (b.dataset.kind === 'refresh') b.hidden = true;
}

function handleError(err) {
  if (err instanceof ApiError && err.status === 401) {
    showBanner('The API token is missing or was rejected: paste a token to continue.');
    $('#token-form').hidden = false;
    $('#token-input').focus();
    return;
  }
  showBanner(`Could not refresh: ${err.message || err}`);
}

let stream = null;
let retry = null;

function connect() {
  if (stream) stream.close();
  clearTimeout(retry);
  // every event kind but role can change occupancy, the queue and a job's detail; the refresh is throttled
  const onEvent = (kind, ev) => (kind === 'role' ? setRole(ev.data) : invalidate('snapshot', 'jobs', 'queues', 'detail'));
  stream = openStream(onEvent, (s) => {
    setLive(s);
    if (s === 'live') invalidate(...ALL); // catch up on anything missed while connecting
    if (s === 'off' && getToken()) retry = setTimeout(connect, POLL_DOWN_MS);
  });
}

/** The live indicator: 'live', 'connecting', 'off' or 'standby' (the page then polls, as when the stream is down). */
function setLive(s, title = 'Live updates (Server-Sent Events)') {
  state.live = s;
  const el = $('#live');
  el.dataset.state = s;
  el.textContent = { live: 'live', connecting: 'connecting…', off: 'offline', standby: 'standby' }[s];
  el.title = title;
}

/** A ``role`` event: on a standby, say so and name the leader (its stream is quiet until it takes over). */
function setRole({ role, leader }) {
  const b = $('#banner');
  if (role !== 'standby') {
    if (b.dataset.kind === 'standby') b.hidden = true;
    setLive('live');
    invalidate(...ALL);
    return;
  }
  const url = leader && /^https?:\/\//.test(leader.url) ? leader.url : '';
  const who = !leader ? 'No leader is known at the moment; a standby takes over shortly.'
    : `The leader is ${esc(leader.holder)}${url ? ` at <a href="${esc(url)}">${esc(url)}</a>` : ''} (epoch ${leader.epoch}).`;
  showBanner('', 'standby');
  b.innerHTML = `This server is a <b>standby</b>: it schedules nothing and sends no live events until it takes over;
    this page shows the database as it was at most a few seconds ago. ${who}`;
  setLive('standby', 'A standby: no live events; the page refreshes every 5 s');
}

function setupToken() {
  const form = $('#token-form');
  $('#token-toggle').addEventListener('click', () => {
    form.hidden = !form.hidden;
    if (!form.hidden) $('#token-input').focus();
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const value = $('#token-input').value.trim();
    if (!value) return;
    setToken(value);
    $('#token-input').value = '';
    form.hidden = true;
    connect();
    invalidate(...ALL);
  });
  $('#token-forget').addEventListener('click', () => {
    clearToken();
    if (stream) stream.close();
    $('#token-msg').textContent = 'Token forgotten.';
  });
}

// ------------------------------------------------------------ events
function setupEvents() {
  for (const b of document.querySelectorAll('[role=tab]')) b.addEventListener('click', () => selectTab(b.dataset.tab));
  document.addEventListener('click', (e) => {
    const el = e.target.closest('[data-action]');
    if (!el || el.closest('#submit-result')) return;
    const { action } = el.dataset;
    if (action === 'open') { e.preventDefault(); openJob(Number(el.dataset.id)); }
    if (action === 'cancel') { e.preventDefault(); cancelJob(el); }
    if (action === 'expand') {
      const id = Number(el.dataset.id);
      if (state.expanded.has(id)) state.expanded.delete(id); else state.expanded.add(id);
      renderJobs();
    }
    if (action === 'node') {
      e.preventDefault();
      state.selected = { node: el.dataset.node, device: null };
      selectTab('cluster');
      map.select(el.dataset.node);
      renderNodePanel();
    }
    if (action === 'device') {
      e.preventDefault();
      const device = el.dataset.device === '' ? null : Number(el.dataset.device);
      state.selected = { ...state.selected, device };
      map.select(state.selected.node, device);
      renderNodePanel();
    }
  });
  $('#drawer-close').addEventListener('click', closeJob);
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && state.detailId != null) closeJob(); });
  $('#map-find').addEventListener('change', (e) => {
    const q = e.target.value.trim().toLowerCase();
    if (!q || !state.snapshot) return;
    const nodes = state.snapshot.nodes;
    const node = nodes.find((n) => n.name.toLowerCase() === q) || nodes.find((n) => n.name.toLowerCase().includes(q));
    if (!node) { $('#node-panel').innerHTML = `<p class="muted">No node matches “${esc(q)}”.</p>`; return; }
    state.selected = { node: node.name, device: null };
    map.select(node.name);
    renderNodePanel();
  });
  setupSubmit($('#submit-form'), {
    onSubmitted: () => invalidate(...ALL),
    onOpen: openJob,
  });
}

// ------------------------------------------------------------ start
function start() {
  takeTokenFromUrl();
  setupToken();
  setupEvents();
  let tab = 'cluster';
  try { tab = localStorage.getItem('quasched.tab') || 'cluster'; } catch { /* ignore */ }
  selectTab(document.getElementById(`view-${tab}`) ? tab : 'cluster');
  const hasToken = () => Boolean(getToken());
  setInterval(() => { if (hasToken()) invalidate('snapshot', 'jobs', 'queues', 'detail'); }, POLL_LIVE_MS);
  setInterval(() => {
    if (hasToken() && state.live !== 'live') invalidate('snapshot', 'jobs', 'queues', 'detail');
  }, POLL_DOWN_MS);
  setInterval(() => { if (hasToken() && state.tab === 'trends') invalidate('trends'); }, TRENDS_MS);
  setInterval(() => { if (state.tab === 'jobs') tickClocks(); }, 1000);
  if (!hasToken()) {
    handleError(new ApiError(401, 'no token'));
    return;
  }
  connect();
  invalidate(...ALL);
}

start();
