// The Teams view: per queue, GPUs used (within quota / borrowed) against quota and fair share.

import { esc, fmtHours, fmtNum } from './format.js';

const quotaTotal = (q) => Object.values(q.quota || {}).reduce((a, b) => a + b, 0);

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

/** One row per queue; bars share one scale (the largest of quota, use and fair share). */
export function teamsHtml(queues) {
  if (!queues.length) return '<p class="muted">No queues.</p>';
  const scale = Math.max(1, ...queues.map((q) => Math.max(quotaTotal(q), q.used_gpus, q.fair_share_gpus)));
  const pct = (v) => `${Math.min(100, (v / scale) * 100).toFixed(2)}%`;
  const note = `<p class="muted small scale-note">All bars share one scale: 0 – ${fmtNum(scale)} GPUs.</p>`;
  return note + queues.map((q) => {
    const quota = quotaTotal(q);
    const borrowed = Math.min(q.borrowed_gpus || 0, q.used_gpus);
    const within = q.used_gpus - borrowed;
    const quotaMark = quota > 0 ? `<i class="bar-quota" style="width:${pct(quota)}" title="quota ${fmtNum(quota)} GPUs"></i>` : '';
    return `<div class="team" data-team="${esc(q.name)}">
      <div class="team-name"><b>${esc(q.name)}</b>
        <div class="muted small">${q.cohort ? `cohort ${esc(q.cohort)} · ` : ''}weight ${fmtNum(q.weight)}</div>
        <div class="muted small">${q.running} running · ${q.pending} pending</div></div>
      <div class="team-bars">
        <div class="bar" role="img" aria-label="${esc(q.name)}: ${fmtNum(q.used_gpus)} GPUs used, quota ${fmtNum(quota)}, fair share ${fmtNum(q.fair_share_gpus)}">
          ${quotaMark}
          <i class="bar-used" style="width:${pct(within)}"></i><i class="bar-borrowed" style="left:${pct(within)};width:${pct(borrowed)}"></i>
          <i class="bar-fair" style="left:${pct(q.fair_share_gpus)}" title="fair share ${fmtNum(q.fair_share_gpus)} GPUs"></i>
        </div>
        <div class="team-nums">
          <span><b>${fmtNum(q.used_gpus)}</b> GPUs used</span>
          <span>quota <b>${quota > 0 ? fmtNum(quota) : '–'}</b></span>
          <span>borrowed <b class="${borrowed > 0 ? 'borrowed' : ''}">${fmtNum(q.borrowed_gpus)}</b></span>
          <span>fair share <b>${fmtNum(q.fair_share_gpus)}</b></span>
          <span class="muted">${esc(quotaText(q))}${q.borrowing_limit != null ? ` · borrowing limit ${fmtNum(q.borrowing_limit)}` : ''}</span>
        </div>
      </div></div>`;
  }).join('');
}
