// The federation front's dashboard: its zones (intensity × PUE now and the next 24 h it holds), its members, its
// jobs (where and when each goes, and why) and the carbon the ended jobs saved against their baselines. It reads
// the front's API every 5 s with the token, as serve's dashboard does, with serve's modules (api.js, format.js,
// charts.js, jobs.js), served beside this folder under /static/.

import { api, ApiError, clearToken, getToken, setToken, takeTokenFromUrl } from '../api.js';
import { lineChart } from '../charts.js';
import { esc, fmtNum, fmtPct } from '../format.js';
import { stateBadge } from '../jobs.js';

const POLL_MS = 5000;
/** Hours of each zone's forecast shown, and the newest jobs listed. */
const HOURS = 24;
const JOBS = 200;
const COLORS = ['#2f6db5', '#15803d', '#e07b1a', '#8e5cb5', '#b91c1c', '#0e7490', '#a16207', '#be185d'];

const $ = (sel) => document.querySelector(sel);

const state = { zones: [], members: [], jobs: [], carbon: [], refreshes: 0, read: null };
window.quaschedFront = { state };

// ------------------------------------------------------------ formats
const iso = (t) => new Date(t * 1000).toISOString();
/** Epoch seconds as the front's reasons write them: "2026-12-02 14:00:00 UTC". */
const fmtUtc = (t) => (t == null ? '–' : `${iso(t).slice(0, 10)} ${iso(t).slice(11, 19)} UTC`);
/** An hour on a chart: "12-02 14:00" (UTC). */
const fmtHour = (t) => `${iso(t).slice(5, 10)} ${iso(t).slice(11, 16)}`;
/** g CO2e/kWh, whole. */
const fmtG = (g) => (g == null || !Number.isFinite(g) ? '–' : String(Math.round(g)));
/** kg CO2e: "1234", "12.35", "0.123" (3 decimals below 1 kg, 2 below 100, whole above). */
function fmtKg(kg) {
  if (kg == null || !Number.isFinite(kg)) return '–';
  const a = Math.abs(kg);
  return a >= 100 ? kg.toFixed(0) : a >= 1 ? kg.toFixed(2) : kg.toFixed(3);
}

/** A round top for a y axis over [0, v] (the charts' tick steps: 1, 2, 2.5, 5 × 10^k). */
function niceTop(v) {
  if (!(v > 0)) return 1;
  const raw = v / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  return Math.ceil(v / step - 1e-9) * step;
}

// ------------------------------------------------------------ reading
let inFlight = null;

/** Read zones, members, jobs and carbon, then draw them (one read at a time). */
function refresh() {
  if (!getToken()) { handleError(new ApiError(401, 'no token')); return Promise.resolve(); }
  if (inFlight) return inFlight;
  inFlight = (async () => {
    try {
      const [zones, members, jobs, carbon] = await Promise.all([
        api(`/zones?hours=${HOURS}`), api('/members'), api(`/jobs?limit=${JOBS}`), api('/carbon'),
      ]);
      Object.assign(state, { zones, members, jobs, carbon, read: new Date() });
      render();
      state.refreshes += 1;
      hideBanner();
    } catch (err) {
      handleError(err);
    } finally {
      inFlight = null;
    }
  })();
  return inFlight;
}

// ------------------------------------------------------------ drawing
function render() {
  renderHeader();
  renderZones();
  renderMembers();
  renderJobs();
  renderSavings();
  const el = $('#updated');
  el.dataset.state = 'live';
  el.textContent = `read ${state.read.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' })}`;
}

const notSent = (j) => j.state === 'pending' && j.remote == null;

function totals() {
  const sum = (key) => state.carbon.reduce((s, t) => s + (t[key] || 0), 0);
  return { jobs: sum('jobs'), kwh: sum('kwh'), kg: sum('kg'), baseline: sum('baseline_kg'), saved: sum('saved_kg') };
}

function renderHeader() {
  const up = state.members.filter((m) => m.up).length;
  $('#kpi-members').textContent = `${up} / ${state.members.length}`;
  const gpus = state.members.reduce((s, m) => s + m.gpus, 0);
  const used = state.members.reduce((s, m) => s + m.gpu_used_milli, 0) / 1000;
  $('#kpi-gpus').textContent = `${fmtNum(used)} / ${gpus}`;
  $('#kpi-waiting').textContent = String(state.jobs.filter(notSent).length);
  $('#kpi-running').textContent = String(state.jobs.filter((j) => j.state === 'running').length);
  $('#kpi-saved').textContent = state.carbon.length ? `${fmtKg(totals().saved)} kg` : '–';
}

function renderZones() {
  const zones = state.zones;
  const body = $('#zones-table tbody');
  if (!zones.length) {
    body.innerHTML = '<tr><td colspan="6" class="empty">No members.</td></tr>';
    $('#zone-charts').innerHTML = '';
    return;
  }
  body.innerHTML = zones.map((z) => {
    const next = z.next || [];
    const k = next.reduce((best, g, i) => (g < next[best] ? i : best), 0);
    const low = next.length ? `${fmtG(next[k])} at ${fmtUtc(z.start + k * 3600)}` : '–';
    const signal = z.warning ? `<span class="warn zone-warning">⚠ ${esc(z.warning)}</span>` : '<span class="muted">fresh</span>';
    return `<tr data-member="${esc(z.member)}"><td>${esc(z.member)}</td><td>${esc(z.zone)}</td>
      <td class="num">${z.pue.toFixed(2)}</td><td class="num zone-now" data-value="${z.now}">${fmtG(z.now)}</td>
      <td class="zone-low">${low}</td><td class="zone-signal">${signal}</td></tr>`;
  }).join('');
  const charts = $('#zone-charts');
  charts.innerHTML = zones.map((z, i) => `<figure class="chart zone-chart" data-member="${esc(z.member)}"
    id="zone-chart-${i}"></figure>`).join('');
  const top = niceTop(Math.max(0, ...zones.flatMap((z) => z.next || [])));
  zones.forEach((z, i) => {
    const figure = $(`#zone-chart-${i}`);
    const samples = (z.next || []).map((g, h) => ({ time: z.start + h * 3600, g }));
    lineChart(figure, samples, {
      key: 'g', title: `${z.member} · ${z.zone}`, color: COLORS[i % COLORS.length], max: top,
      digits: 0, value: z.now, fmtX: fmtHour,
    });
    if (z.warning) figure.insertAdjacentHTML('beforeend', `<p class="warn small zone-warning">⚠ ${esc(z.warning)}</p>`);
  });
}

function renderMembers() {
  const body = $('#members-table tbody');
  if (!state.members.length) { body.innerHTML = '<tr><td colspan="6" class="empty">No members.</td></tr>'; return; }
  body.innerHTML = state.members.map((m) => {
    const used = m.gpu_used_milli / 1000;
    const pct = m.gpus ? (100 * used) / m.gpus : 0;
    const badge = m.up ? '<span class="badge state-running">up</span>' : '<span class="badge state-failed">down</span>';
    const error = m.error ? `<span class="${m.up ? 'warn' : 'bad'}">${esc(m.error)}</span>` : '<span class="muted">–</span>';
    return `<tr data-member="${esc(m.name)}"><td>${esc(m.name)}</td><td>${esc(m.zone)}</td>
      <td class="member-state">${badge}</td><td class="num">${m.gpus}</td>
      <td class="nowrap member-use">${fmtNum(used)} (${fmtPct(pct)})
        <span class="meter"><i style="width:${Math.min(100, pct).toFixed(1)}%"></i></span></td>
      <td class="member-error">${error}</td></tr>`;
  }).join('');
}

function renderJobs() {
  const body = $('#jobs-table tbody');
  $('#jobs-count').textContent = state.jobs.length ? String(state.jobs.length) : '';
  if (!state.jobs.length) { body.innerHTML = '<tr><td colspan="8" class="empty">No jobs yet.</td></tr>'; return; }
  body.innerHTML = state.jobs.map((j) => {
    const deferred = notSent(j) && j.release_at != null && j.release_at > j.submitted_at;
    const where = j.member ? `${esc(j.member)}${j.remote != null ? ` <span class="muted small">job ${esc(j.remote)}</span>` : ''}`
      : '<span class="muted">–</span>';
    return `<tr data-id="${j.id}"><td class="nowrap">#${j.id} ${esc(j.name)}</td><td>${esc(j.team)}</td>
      <td class="job-state">${stateBadge(j.state)}${deferred ? ' <span class="badge deferred">deferred</span>' : ''}</td>
      <td class="job-member">${where}</td><td class="nowrap job-release">${fmtUtc(j.release_at)}</td>
      <td class="why">${j.why ? esc(j.why) : '<span class="muted">not decided yet</span>'}</td>
      <td class="num job-kg">${fmtKg(j.kg)}</td><td class="num job-baseline">${fmtKg(j.baseline_kg)}</td></tr>`;
  }).join('');
}

function renderSavings() {
  const t = totals();
  const total = $('#savings-total');
  const body = $('#savings-table tbody');
  if (!state.carbon.length) {
    total.textContent = 'No job has ended yet.';
    body.innerHTML = '<tr><td colspan="7" class="empty">No job has ended yet.</td></tr>';
    return;
  }
  const share = (saved, base) => (base > 0 ? fmtPct((100 * saved) / base) : '–');
  total.innerHTML = `<b id="saved-kg" data-value="${t.saved}">${fmtKg(t.saved)} kg CO2e saved</b>
    (${share(t.saved, t.baseline)} of the baseline's <span id="baseline-kg" data-value="${t.baseline}">${fmtKg(t.baseline)}</span> kg):
    ${t.jobs} ended job${t.jobs === 1 ? '' : 's'} emitted <span id="emitted-kg" data-value="${t.kg}">${fmtKg(t.kg)}</span> kg`;
  const row = (name, r, cls = '') => `<tr class="${cls}" data-team="${esc(name)}"><td>${esc(name)}</td>
    <td class="num">${r.jobs}</td><td class="num">${fmtNum(r.kwh, 2)}</td><td class="num">${fmtKg(r.kg)}</td>
    <td class="num">${fmtKg(r.baseline_kg)}</td><td class="num team-saved" data-value="${r.saved_kg}">${fmtKg(r.saved_kg)}</td>
    <td class="num">${share(r.saved_kg, r.baseline_kg)}</td></tr>`;
  body.innerHTML = state.carbon.map((r) => row(r.team, r)).join('')
    + row('all teams', { jobs: t.jobs, kwh: t.kwh, kg: t.kg, baseline_kg: t.baseline, saved_kg: t.saved }, 'total');
}

// ------------------------------------------------------------ errors, token
function showBanner(text) {
  const b = $('#banner');
  b.textContent = text;
  b.hidden = false;
}

function hideBanner() { $('#banner').hidden = true; }

function handleError(err) {
  $('#updated').dataset.state = 'off';
  if (err instanceof ApiError && err.status === 401) {
    showBanner('The API token is missing or was rejected: paste a token to continue.');
    $('#token-form').hidden = false;
    $('#token-input').focus();
    return;
  }
  showBanner(`Could not read the front: ${err.message || err}`);
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
    refresh();
  });
  $('#token-forget').addEventListener('click', () => {
    clearToken();
    $('#token-msg').textContent = 'Token forgotten.';
  });
}

// ------------------------------------------------------------ start
takeTokenFromUrl();
setupToken();
$('#refresh').addEventListener('click', () => refresh());
setInterval(() => { if (getToken()) refresh(); }, POLL_MS);
refresh();
