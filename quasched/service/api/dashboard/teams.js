// The Teams view: per queue, GPUs used (within quota / borrowed) against quota and fair share.

import { esc, fmtHours, fmtNum } from './format.js';

function quotaText(q) {
  const entries = Object.entries(q.quota || {});
  if (!entries.length) return 'no quota (not limited)';
  return entries.map(([m, v]) => `${m === '*' ? 'any model' : m}: ${fmtNum(v)}`).join(' · ');
}

/** Per team: jobs, running now, wall time run and GPU-hours booked (``GET /usage``). */
export function usageHtml(rows) {
  if (!rows.length) return '';
  const body = rows.map((u) => `<tr data-team="${esc(u.team)}"><td>${esc(u.team)}</td><td class="num">${u.jobs}</td>
    <td class="num">${u.running}</td><td class="num">${fmtHours(u.wall_s / 3600)}</td>
    <td class="num gpu-hours"><b>${fmtHours(u.gpu_hours)}</b></td></tr>`).join('');
  return `<h2>Usage</h2><table class="grid usage"><thead><tr><th>Team</th><th class="num">Jobs</th>
    <th class="num">Running</th><th class="num">Wall hours</th><th class="num">GPU-hours</th></tr></thead>
    <tbody>${body}</tbody></table>
    <p class="muted small">GPU-hours: GPUs held × hours run, the runs so far (the current ones included).</p>`;
}

const modelName = (key) => (key === '*' ? 'other models' : key);

/** Per GPU model (quota key): [key, used, quota or null]; a queue without quota shows its use per model. */
function perModel(q) {
  const quota = q.quota || {};
  const used = q.used_gpus_by_model || {};
  const keys = [...new Set([...Object.keys(quota), ...Object.keys(used)])].sort();
  return keys.map((k) => [k, used[k] || 0, k in quota ? quota[k] : null]);
}

/** One row per queue, one bar per GPU model (no mixing T4 and A100); bars share one scale. */
export function teamsHtml(queues) {
  if (!queues.length) return '<p class="muted">No queues.</p>';
  const scale = Math.max(1, ...queues.flatMap((q) => perModel(q).map(([, used, quota]) => Math.max(used, quota || 0))));
  const pct = (v) => `${Math.min(100, (v / scale) * 100).toFixed(2)}%`;
  const note = `<p class="muted small scale-note">All bars share one scale: 0 – ${fmtNum(scale)} GPUs of one model.</p>`;
  const bar = (q, [key, used, quota]) => {
    const within = quota == null ? used : Math.min(used, quota);
    const borrowed = used - within;
    const quotaMark = quota ? `<i class="bar-quota" style="width:${pct(quota)}" title="quota ${fmtNum(quota)} GPUs"></i>` : '';
    return `<div class="team-model" data-model="${esc(key)}"><span class="small">${esc(modelName(key))}</span>
      <div class="bar" role="img" aria-label="${esc(q.name)}: ${fmtNum(used)} ${esc(modelName(key))} GPUs used${quota == null ? '' : ` of a quota of ${fmtNum(quota)}`}">
        ${quotaMark}<i class="bar-used" style="width:${pct(within)}"></i><i class="bar-borrowed" style="left:${pct(within)};width:${pct(borrowed)}"></i>
      </div>
      <span class="small">${fmtNum(used)} used${quota == null ? '' : ` · quota ${fmtNum(quota)}`}${borrowed > 0 ? ` · <b class="borrowed">${fmtNum(borrowed)} borrowed</b>` : ''}</span></div>`;
  };
  return note + queues.map((q) => {
    const models = perModel(q);
    return `<div class="team" data-team="${esc(q.name)}">
      <div class="team-name"><b>${esc(q.name)}</b>
        <div class="muted small">${q.cohort ? `cohort ${esc(q.cohort)} · ` : ''}weight ${fmtNum(q.weight)}</div>
        <div class="muted small">${q.running} running · ${q.pending} pending</div></div>
      <div class="team-bars">
        ${models.length ? models.map((m) => bar(q, m)).join('') : '<p class="muted small">no GPUs used</p>'}
        <div class="team-nums">
          <span><b>${fmtNum(q.used_gpus)}</b> GPUs used in all</span>
          <span>fair share <b>${fmtNum(q.fair_share_gpus)}</b> GPUs</span>
          <span class="muted">${esc(quotaText(q))}${q.borrowing_limit != null ? ` · borrowing limit ${fmtNum(q.borrowing_limit)}` : ''}</span>
        </div>
      </div></div>`;
  }).join('');
}
