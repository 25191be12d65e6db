// The job detail drawer: fields, placement, pending reason, event history (GET /jobs/{id}). Another team's job
// comes without its command, env, workdir and exit (null): the drawer says whose they are.

import { esc, fmtCores, fmtData, fmtDuration, fmtGpuCount, fmtHours, fmtMiB, fmtTime, FINISHED, shellJoin } from './format.js';
import { evidenceHtml, reasonBadge, stateBadge } from './jobs.js';

export function detailHtml(j) {
  const field = (k, v) => `<dt>${esc(k)}</dt><dd>${v}</dd>`;
  const fields = [
    field('State', stateBadge(j.state)),
    field('Team', esc(j.team)),
    field('User', esc(j.user || '–')),
    j.app ? field('App', esc(j.app)) : '',
    field('Priority', `${esc(j.priority_class)} <span class="muted">(${j.priority})</span>`),
    field('Pods', j.pods),
    field('Per pod', `${fmtCores(j.cpu)} · ${fmtMiB(j.memory_mib)} · ${fmtGpuCount(j.gpus)}`),
    field('GPU model', esc(j.gpu_model || 'any')),
    j.command === null ? field('Command', `<span class="muted">shown to team ${esc(j.team)} and admins</span>`)
      : j.command.length ? field('Command', `<code>${esc(shellJoin(j.command))}</code>`)
        : field('Duration', j.duration_s == null ? 'until reported' : fmtDuration(j.duration_s)),
    Object.keys(j.env || {}).length ? field('Environment', Object.entries(j.env).map(([k, v]) =>
      `<code>${esc(k)}=${esc(v)}</code>`).join(' ')) : '',
    j.workdir ? field('Working directory', `<code>${esc(j.workdir)}</code>`) : '',
    j.time_limit_s != null ? field('Time limit', fmtDuration(j.time_limit_s)) : '',
    j.exit_code != null ? field('Exit code', `<b>${j.exit_code}</b>`) : '',
    field('Usage', `${fmtDuration(j.wall_s)} run · ${fmtHours(j.gpu_hours)} GPU-hours`),
    field('Submitted', fmtTime(j.submitted_at)),
    field('Started', fmtTime(j.started_at)),
    field('Finished', fmtTime(j.finished_at)),
    j.position != null ? field('Queue position', j.position) : '',
    j.solver ? field('Placed by', esc(j.solver) + (j.gap != null ? ` <span class="muted">gap ${j.gap}</span>` : '')) : '',
    j.restarts ? field('Restarts', j.restarts) : '',
  ].join('');
  const placement = (j.placement || []).length ? `<h3>Placement</h3><ul class="placement-list">${j.placement.map((p, i) =>
    `<li><span class="muted">pod ${i}</span> <a href="#" data-action="node" data-node="${esc(p.node)}">${esc(p.node)}</a>
      GPU ${p.devices.length ? p.devices.join(', ') : '–'}</li>`).join('')}</ul>` : '';
  const why = j.state === 'pending' ? 'Why pending' : j.state === 'stopping' ? 'Why stopping' : 'Why it ended';
  const reason = j.reason ? `<h3>${why}</h3><p>${reasonBadge(j.reason.code)} ${esc(j.reason.message)}</p>
    ${evidenceHtml(j.reason.evidence)}` : '';
  const events = (j.events || []).map((e) => `<tr><td class="nowrap">${fmtTime(e.time)}</td><td><b>${esc(e.kind)}</b></td>
    <td>${esc(e.node || '')}</td><td class="data">${esc(fmtData(e.data))}</td></tr>`).join('');
  const cancel = FINISHED.has(j.state) ? '' :
    `<button type="button" class="btn btn-danger" data-action="cancel" data-id="${j.id}">Cancel job</button>`;
  const log = (j.command || []).length ? `<h3>Log <span class="muted small" id="job-log-state"></span></h3>
    <pre id="job-log" class="log" tabindex="0" aria-label="Output of job ${j.id}"></pre>` : '';
  return `<dl class="fields">${fields}</dl>${cancel}${reason}${placement}${log}
    <h3>Events</h3>
    <table class="grid events"><thead><tr><th>Time</th><th>Event</th><th>Node</th><th>Data</th></tr></thead>
    <tbody>${events || '<tr><td colspan="4" class="empty">No events.</td></tr>'}</tbody></table>`;
}
