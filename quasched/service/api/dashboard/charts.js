// Small inline-SVG line charts for the time series (no chart library).

import { esc, fmtTime } from './format.js';

const W = 560;
const H = 200;
const M = { left: 44, right: 12, top: 12, bottom: 26 };

/** "Nice" tick values covering [0, max]. */
function ticks(max, count = 4, integer = false) {
  if (max <= 0) return [0, 1];
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  if (integer) step = Math.max(1, Math.ceil(step));
  const out = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) out.push(+v.toFixed(10));
  if (out[out.length - 1] < max) out.push(out[out.length - 1] + step);
  return out;
}

/** Reduce to about ``n`` points, keeping each bucket's min and max (spikes stay visible). */
function downsample(points, n) {
  if (points.length <= n * 2) return points;
  const size = points.length / n;
  const out = [];
  for (let b = 0; b < n; b++) {
    const slice = points.slice(Math.floor(b * size), Math.floor((b + 1) * size));
    if (!slice.length) continue;
    let lo = slice[0];
    let hi = slice[0];
    for (const p of slice) { if (p[1] < lo[1]) lo = p; if (p[1] > hi[1]) hi = p; }
    if (lo === hi) out.push(lo); else out.push(...(lo[0] < hi[0] ? [lo, hi] : [hi, lo]));
  }
  return out;
}

/**
 * Draw ``samples`` (GET /timeseries) into ``figure``: ``key`` is the field, ``max`` a fixed y maximum
 * (100 for percentages) or null to fit the data; ``value``, the figure in the caption (default: the last sample's);
 * ``fmtX`` writes the times (default: ``fmtTime``).
 */
export function lineChart(figure, samples, { key, title, unit = '', color, max = null, digits = 1, value, fmtX = fmtTime }) {
  const pts = samples.map((s) => [s.time, Number(s[key]) || 0]);
  const last = value !== undefined ? value : pts.length ? pts[pts.length - 1][1] : null;
  const fmt = (v) => `${Number.isInteger(v) ? v : v.toFixed(digits)}${unit}`;
  const t0 = pts.length ? pts[0][0] : 0;
  const t1 = pts.length ? pts[pts.length - 1][0] : 1;
  const ymax = max ?? Math.max(1, ...pts.map((p) => p[1]));
  const yt = ticks(ymax, 4, digits === 0);
  const top = max ?? yt[yt.length - 1];
  const x = (t) => M.left + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - M.left - M.right);
  const y = (v) => H - M.bottom - (v / top) * (H - M.top - M.bottom);
  const line = downsample(pts, W).map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ');
  const grid = (max ? ticks(max) : yt).map((v) => `<line class="grid" x1="${M.left}" x2="${W - M.right}" y1="${y(v)}" y2="${y(v)}"/>
      <text class="tick" x="${M.left - 6}" y="${y(v)}" text-anchor="end" dominant-baseline="middle">${fmt(v)}</text>`).join('');
  const xt = pts.length > 1 ? [t0, (t0 + t1) / 2, t1].map((t, i) => `<text class="tick" x="${x(t)}" y="${H - 8}"
      text-anchor="${['start', 'middle', 'end'][i]}">${esc(fmtX(t))}</text>`).join('') : '';
  const area = pts.length > 1 ? `<polygon class="area" fill="${color}" points="${x(t0)},${y(0)} ${line} ${x(t1)},${y(0)}"/>` : '';
  figure.innerHTML = `<figcaption><span class="chart-title">${esc(title)}</span>
      <span class="chart-value" style="color:${color}">${last == null ? '–' : fmt(last)}</span></figcaption>
    <svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(title)}">
      ${grid}${xt}${area}
      <polyline fill="none" stroke="${color}" stroke-width="2" stroke-linejoin="round" points="${line}"/>
      <line class="cursor" y1="${M.top}" y2="${H - M.bottom}" visibility="hidden"/>
      <text class="readout" x="${W - M.right}" y="${M.top + 4}" text-anchor="end"></text>
    </svg>
    ${pts.length ? '' : '<p class="muted chart-empty">No samples yet.</p>'}`;
  const svg = figure.querySelector('svg');
  const cursor = svg.querySelector('.cursor');
  const readout = svg.querySelector('.readout');
  svg.addEventListener('mousemove', (e) => {
    if (!pts.length) return;
    const r = svg.getBoundingClientRect();
    const px = ((e.clientX - r.left) / r.width) * W;
    const t = t0 + ((px - M.left) / (W - M.left - M.right)) * (t1 - t0);
    let lo = 0;
    let hi = pts.length - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (pts[mid][0] < t) lo = mid + 1; else hi = mid; }
    const p = pts[lo];
    cursor.setAttribute('x1', x(p[0]));
    cursor.setAttribute('x2', x(p[0]));
    cursor.setAttribute('visibility', 'visible');
    readout.textContent = `${fmtX(p[0])}: ${fmt(p[1])}`;
  });
  svg.addEventListener('mouseleave', () => {
    cursor.setAttribute('visibility', 'hidden');
    readout.textContent = '';
  });
}
