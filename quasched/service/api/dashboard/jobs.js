// The Jobs view: pending queue (position, reason, evidence), running jobs, recently finished.
// Rows carry data-action/data-id; app.js handles clicks by delegation.

import { esc, fmtData, fmtPlacement, fmtRequest, fmtTime, since } from './format.js';

const MAX_ROWS = 500;

const jobLink = (j) => `<a href="#" class="job-link" data-action="open" data-id="${j.id}">#${j.id} ${esc(j.name)}</a>` +
  (j.user ? `<div class="muted small">${esc(j.user)}</div>` : '');

const cancelBtn = (j) => `<button type="button" class="btn btn-small btn-danger" data-action="cancel" data-id="${j.id}"
  aria-label="Cancel job ${j.id}">Cancel</button>`;

export const reasonBadge = (code) => `<span class="badge reason reason-${esc(code)}">${esc(code)}</span>`;
export const stateBadge = (state) => `<span class="badge state state-${esc(state)}">${esc(state)}</span>`;

function evidenceHtml(evidence) {
  const entries = Object.entries(evidence || {});
  if (!entries.length) return '<span class="muted">no evidence recorded</span>';
  return `<dl class="evidence">${entries.map(([k, v]) =>
    `<dt>${esc(k)}</dt><dd>${esc(typeof v === 'object' ? JSON.stringify(v) : v)}</dd>`).join('')}</dl>`;
}

function more(n, total) {
  return total > n ? `<tr><td colspan="8" class="muted">… ${total - n} more not shown</td></tr>` : '';
}

/** Pending jobs in queue order; ``expanded`` = ids whose evidence row is open. */
export function pendingRows(jobs, now, expanded) {
  if (!jobs.length) return '<tr><td colspan="8" class="empty">No pending jobs.</td></tr>';
  return jobs.slice(0, MAX_ROWS).map((j) => {
    const r = j.reason;
    const open = expanded.has(j.id);
    const reason = r ? `${reasonBadge(r.code)} <span class="reason-msg">${esc(r.message)}</span>
      <button type="button" class="btn-link" data-action="expand" data-id="${j.id}" aria-expanded="${open}">
      ${open ? 'hide' : 'evidence'}</button>` : '<span class="muted">–</span>';
    const row = `<tr data-id="${j.id}" class="pending-row">
      <td class="num">${j.position == null ? '–' : j.position}</td>
      <td>${jobLink(j)}</td><td>${esc(j.team)}</td><td>${esc(fmtRequest(j))}</td>
      <td>${esc(j.priority_class)}</td><td class="nowrap" data-since="${j.submitted_at}">${since(j.submitted_at, now)}</td>
      <td class="reason-cell">${reason}</td><td>${cancelBtn(j)}</td></tr>`;
    return open && r ? `${row}<tr class="evidence-row"><td></td><td colspan="7">${evidenceHtml(r.evidence)}</td></tr>` : row;
  }).join('') + more(MAX_ROWS, jobs.length);
}

export function runningRows(jobs, now) {
  if (!jobs.length) return '<tr><td colspan="7" class="empty">No running jobs.</td></tr>';
  return jobs.slice(0, MAX_ROWS).map((j) => `<tr data-id="${j.id}">
      <td>${jobLink(j)}</td><td>${esc(j.team)}</td><td>${esc(fmtRequest(j))}</td><td>${stateBadge(j.state)}</td>
      <td class="placement">${esc(fmtPlacement(j.placement))}</td><td class="nowrap" data-since="${j.started_at}">${since(j.started_at, now)}</td>
      <td>${cancelBtn(j)}</td></tr>`).join('') + more(MAX_ROWS, jobs.length);
}

/** How a finished job ended beyond its state: a non-zero exit code, else its reason's code (Lost, ...). */
const endNote = (j) => (j.exit_code != null && j.exit_code !== 0 ? `exit ${j.exit_code}` : (j.reason ? j.reason.code : ''));

export function finishedRows(jobs) {
  if (!jobs.length) return '<tr><td colspan="5" class="empty">Nothing finished yet.</td></tr>';
  return jobs.map((j) => `<tr data-id="${j.id}">
      <td>${jobLink(j)}</td><td>${esc(j.team)}</td><td>${esc(fmtRequest(j))}</td>
      <td>${stateBadge(j.state)} <span class="muted small">${esc(endNote(j))}</span></td>
      <td class="nowrap">${fmtTime(j.finished_at)}</td></tr>`).join('');
}

export { evidenceHtml, fmtData };
