// Formatting functions shared by the views (no DOM state here).

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text made safe for innerHTML. */
export function esc(value) {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ESC[c]);
}

/** Epoch-like seconds (wall clock) vs. a virtual clock starting near 0. */
const isEpoch = (t) => t > 1e9;

export function fmtTime(t) {
  if (t == null) return '–';
  if (!isEpoch(t)) return `t=${fmtDuration(t)}`;
  const d = new Date(t * 1000);
  const today = new Date();
  const time = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  return d.toDateString() === today.toDateString() ? time : `${d.toLocaleDateString()} ${time}`;
}

/** Hours (or GPU-hours) with 3 significant digits below 100: "0.00222", "1.50", "12.5", "340". */
export function fmtHours(h) {
  if (h == null || !Number.isFinite(h)) return '–';
  if (h === 0) return '0';
  return h >= 100 ? String(Math.round(h)) : Number(h.toPrecision(3)).toString();
}

/** Argv as a shell would need it typed: words with spaces or quotes in single quotes. */
export function shellJoin(argv) {
  return argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/** Words of a command line as a POSIX shell splits them (quotes and backslashes; no expansion);
 * null when a quote is left open. */
export function shellWords(text) {
  const words = [];
  let word = null;
  let quote = '';
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quote === "'") {
      if (c === "'") quote = ''; else word += c;
    } else if (quote === '"') {
      if (c === '"') quote = '';
      else if (c === '\\' && i + 1 < text.length && '"\\$`'.includes(text[i + 1])) { i += 1; word += text[i]; } else word += c;
    } else if (/\s/.test(c)) {
      if (word !== null) { words.push(word); word = null; }
    } else {
      word = word ?? '';
      if (c === "'" || c === '"') quote = c;
      else if (c === '\\' && i + 1 < text.length) { i += 1; word += text[i]; } else word += c;
    }
  }
  if (quote) return null;
  if (word !== null) words.push(word);
  return words;
}

/** Seconds, rounded to whole ones, as "45s", "12m 05s", "2h 05m", "3d 4h" (119.6 is "2m 00s", never "1m 60s"). */
export function fmtDuration(s) {
  if (s == null || !Number.isFinite(s)) return '–';
  s = Math.round(Math.max(0, s));
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(Math.round(s % 60)).padStart(2, '0')}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** Seconds since ``t`` on the server's clock (``now`` = the newest server time we know). */
export function since(t, now) {
  return t == null ? '–' : fmtDuration(now - t);
}

export function fmtMiB(mib) {
  if (mib == null) return '–';
  if (mib >= 1024 * 1024) return `${+(mib / 1024 / 1024).toFixed(1)} TiB`;
  if (mib >= 1024) return `${+(mib / 1024).toFixed(1)} GiB`;
  return `${mib} MiB`;
}

export function fmtGpus(gpus) {
  if (!gpus) return '0';
  return gpus < 1 ? `${+gpus.toFixed(3)}` : `${gpus}`;
}

export function fmtPct(p, digits = 1) {
  return p == null || !Number.isFinite(p) ? '–' : `${p.toFixed(digits)}%`;
}

export function fmtNum(x, digits = 1) {
  if (x == null || !Number.isFinite(x)) return '–';
  return Number.isInteger(x) ? String(x) : x.toFixed(digits);
}

/** GPUs to one decimal, "<0.1" for a sliver, whole numbers as they are: "3", "17.9", "<0.1". */
const fmtGpuAmount = (g) => (Number.isInteger(g) ? g.toLocaleString() : g < 0.05 ? '<0.1' : g.toFixed(1));

const FRAG_DEFINITION = 'Fragmented free GPU capacity (FGD\'s measure): the free GPU capacity that the typical jobs '
  + '(the shapes most submitted recently) could not use: too small a share left on a GPU, too few free GPUs, CPU or '
  + 'memory on the node, or another GPU model than they ask for.';

/** The header's free GPUs of a snapshot: whole free GPUs, plus the free shares of partly used GPUs. */
export function freeGpus(s) {
  const shared = Math.max(0, s.free_gpus - s.free_whole_gpus);
  const whole = s.free_whole_gpus.toLocaleString();
  const text = shared > 0 ? `${whole} + ${fmtGpuAmount(shared)} shared` : whole;
  const title = `${whole} GPUs with nothing allocated`
    + (shared > 0 ? `, plus ${fmtGpuAmount(shared)} GPUs' worth free on GPUs that jobs share (${fmtGpuAmount(s.free_gpus)} in all)` : '')
    + '. Unhealthy GPUs are not free.';
  return { text, title };
}

/** The header's free GPU capacity the typical jobs could not use: text, tooltip, and whether to show it quietly
 * (an idle cluster: then it measures how the nodes match the typical jobs, not fragmentation left by placements). */
export function unusableGpus(s) {
  if (s.fragmented_gpus == null) {
    return { text: '–', quiet: true, title: `${FRAG_DEFINITION} No job submitted yet: no typical jobs to measure against.` };
  }
  if (s.free_gpus === 0) return { text: '0', quiet: false, title: `${FRAG_DEFINITION} Nothing is free, so nothing is fragmented.` };
  const text = `${fmtGpuAmount(s.fragmented_gpus)} GPUs (${fmtPct(s.fragmentation_pct)})`;
  const idle = s.gpu_allocation_pct === 0;
  const now = `Now ${fmtGpuAmount(s.fragmented_gpus)} of ${fmtGpuAmount(s.free_gpus)} free GPUs.`;
  const why = idle ? ' Nothing is allocated: this is the share of the idle cluster whose nodes do not suit the typical '
    + 'jobs (GPU model, GPUs per node, CPU, memory), not fragmentation left by placements.' : '';
  return { text, quiet: idle, title: `${FRAG_DEFINITION} ${now}${why}` };
}

/** A pod's cores and GPUs in agreement with their counts: "1 core", "0.5 cores", "1 GPU", "0.5 GPU", "2 GPUs". */
export const fmtCores = (cpu) => `${fmtNum(cpu)} core${cpu === 1 ? '' : 's'}`;
export const fmtGpuCount = (gpus) => `${fmtGpus(gpus)} GPU${gpus > 1 ? 's' : ''}`;

/** A job's request in one line: "2 × (1 GPU A100 · 4 cores · 16 GiB)". */
export function fmtRequest(job) {
  const parts = [];
  if (job.gpus) parts.push(`${fmtGpuCount(job.gpus)}${job.gpu_model ? ' ' + job.gpu_model : ''}`);
  parts.push(fmtCores(job.cpu));
  parts.push(fmtMiB(job.memory_mib));
  const one = parts.join(' · ');
  return job.pods > 1 ? `${job.pods} × (${one})` : one;
}

/** "node-a [0,1] · node-b [3]" (at most ``max`` nodes, then "+n"). */
export function fmtPlacement(placement, max = 2) {
  if (!placement || !placement.length) return '–';
  const shown = placement.slice(0, max).map((p) => `${p.node} [${p.devices.join(',')}]`);
  if (placement.length > max) shown.push(`+${placement.length - max} more`);
  return shown.join(' · ');
}

/** Compact JSON-ish text of an object for tables. */
export function fmtData(data) {
  if (!data || !Object.keys(data).length) return '';
  return Object.entries(data).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' ');
}

export const FINISHED = new Set(['succeeded', 'failed', 'cancelled']);
