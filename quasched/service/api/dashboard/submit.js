// The submit form: POST /jobs, field-level errors from FastAPI's 422 detail next to the fields.

import { api, ApiError } from './api.js';
import { esc, fmtPlacement, shellWords } from './format.js';

const NUMBER = /^\s*[+-]?(\d+\.?\d*|\.\d+)\s*$/;
const NUMERIC = ['cpu', 'gpus', 'pods'];
const OPTIONAL = ['user', 'gpu_model', 'duration', 'command', 'time_limit'];
const REMEMBER = 'quasched.submit';

/** The request body: numbers where the text is a number (else the text, for the server to reject). */
export function bodyOf(form) {
  const data = Object.fromEntries(new FormData(form).entries());
  const body = {};
  for (const [key, raw] of Object.entries(data)) {
    const value = String(raw).trim();
    if (value === '' && (OPTIONAL.includes(key) || NUMERIC.includes(key))) continue;
    if (key === 'command') {
      body.command = shellWords(value) ?? value; // an open quote: the text, for the server to reject
    } else if (NUMERIC.includes(key) || (['memory', 'duration', 'time_limit'].includes(key) && NUMBER.test(value))) {
      body[key] = NUMBER.test(value) ? Number(value) : value;
    } else {
      body[key] = value;
    }
  }
  return body;
}

function clearErrors(form) {
  for (const el of form.querySelectorAll('[data-error-for]')) el.textContent = '';
  for (const el of form.querySelectorAll('[aria-invalid]')) {
    el.removeAttribute('aria-invalid');
    el.classList.remove('invalid');
  }
}

/** Show ``{field: message}`` next to the fields; the rest (and unknown fields) at the top. */
export function showErrors(form, errors) {
  let first = null;
  const general = [];
  for (const [field, msg] of Object.entries(errors)) {
    const slot = form.querySelector(`[data-error-for="${CSS.escape(field)}"]`);
    const input = form.elements.namedItem(field);
    if (!slot || field === '_form') { general.push(field === '_form' ? msg : `${field}: ${msg}`); continue; }
    slot.textContent = msg;
    if (input) {
      input.setAttribute('aria-invalid', 'true');
      input.classList.add('invalid');
      first = first || input;
    }
  }
  form.querySelector('[data-error-for="_form"]').textContent = general.join(' · ');
  if (first) first.focus();
}

/** Wire the form; ``onSubmitted(job)`` after a 201. */
export function setupSubmit(form, { onSubmitted, onOpen }) {
  const result = form.querySelector('#submit-result');
  const button = form.querySelector('#submit-btn');
  try {
    const saved = JSON.parse(localStorage.getItem(REMEMBER) || '{}');
    if (saved.user) form.elements.user.value = saved.user;
    form.dataset.team = saved.team || '';
  } catch { /* ignore */ }

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearErrors(form);
    result.textContent = '';
    result.className = 'submit-result';
    const body = bodyOf(form);
    body.client_token = crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`;
    button.disabled = true;
    try {
      const job = await api('/jobs', { method: 'POST', body });
      try { localStorage.setItem(REMEMBER, JSON.stringify({ team: body.team, user: body.user || '' })); } catch { /* ignore */ }
      const where = job.state === 'pending'
        ? `pending${job.reason ? ` — ${esc(job.reason.code)}: ${esc(job.reason.message)}` : ''}`
        : `${esc(job.state)} on ${esc(fmtPlacement(job.placement))}`;
      result.innerHTML = `Submitted <a href="#" data-action="open" data-id="${job.id}">job #${job.id}</a> ${esc(job.name)}: ${where}`;
      result.classList.add(job.state === 'pending' ? 'is-pending' : 'is-ok');
      onSubmitted(job);
    } catch (err) {
      if (err instanceof ApiError) {
        showErrors(form, err.status === 401 ? { _form: 'Not signed in: enter an API token (top right).' } : err.fieldErrors());
      } else {
        showErrors(form, { _form: `Could not reach the service: ${err.message}` });
      }
      result.textContent = 'Not submitted.';
      result.classList.add('is-error');
    } finally {
      button.disabled = false;
    }
  });
  result.addEventListener('click', (e) => {
    const a = e.target.closest('[data-action="open"]');
    if (a) { e.preventDefault(); onOpen(Number(a.dataset.id)); }
  });
}

/** Refill the team and GPU-model selects, keeping the user's choice. */
export function fillOptions(form, { teams, models }) {
  const team = form.elements.team;
  const keepTeam = team.value || form.dataset.team;
  const teamHtml = teams.map((t) => `<option value="${esc(t)}">${esc(t)}</option>`).join('');
  if (team.dataset.options !== teams.join('\n')) {
    team.dataset.options = teams.join('\n');
    team.innerHTML = teamHtml;
    if (teams.includes(keepTeam)) team.value = keepTeam;
  }
  const model = form.elements.gpu_model;
  const keepModel = model.value;
  const modelHtml = `<option value="">any</option>${models.map((m) => `<option value="${esc(m)}">${esc(m)}</option>`).join('')}`;
  if (model.dataset.options !== models.join('\n')) {
    model.dataset.options = models.join('\n');
    model.innerHTML = modelHtml;
    if (models.includes(keepModel)) model.value = keepModel;
  }
}
