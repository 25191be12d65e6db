// The cluster map: every node a tile, every GPU device a cell filled by its used milli-GPU.
// One <canvas> (fast at ~1,200 nodes / ~6,000 GPUs), a DOM tooltip, click to select.

import { esc, fmtMiB } from './format.js';

/** Colours for GPU models, in sorted-model order (red is kept for unhealthy devices). */
const PALETTE = ['#2f6db5', '#e07b1a', '#2e8b57', '#8e5cb5', '#1b9aaa', '#9c6b3f', '#d4509a',
  '#6b8e23', '#5060a8', '#b8860b', '#4a7f8c', '#7d5a8c'];
const CPU_ONLY = 'CPU only';
const UNHEALTHY = '#d32f2f';
const SELECT = '#111827';
const HIGHLIGHT = '#e11d48';

const GAP = 1;        // between cells
const PAD = 2;        // inside a tile
const TILE_GAP = 3;   // between tiles
const HEAD = 22;      // section header height
const SECTION_GAP = 10;
const MIN_CELL = 6;
const MAX_CELL = 26;
const LABEL_CELL = 13;   // node names under the tiles from this cell size on
const LABEL_W = 78;
const LABEL_H = 15;
const GROUP_GAP = 5;

/** ``hex`` mixed with white (``t`` = share of white). */
function tint(hex, t) {
  const n = parseInt(hex.slice(1), 16);
  const mix = (c) => Math.round(c + (255 - c) * t);
  return `rgb(${mix(n >> 16)},${mix((n >> 8) & 255)},${mix(n & 255)})`;
}

export class ClusterMap {
  /** ``onSelect({node, device})`` when a node (and device) is clicked. */
  constructor(wrap, canvas, tip, { onSelect = () => {} } = {}) {
    Object.assign(this, { wrap, canvas, tip, onSelect });
    this.ctx = canvas.getContext('2d');
    this.nodes = [];
    this.jobs = new Map();
    this.colors = new Map();
    this.tiles = [];
    this.byName = new Map();
    this.selected = null;   // {node, device}
    this.hover = null;      // tile
    this.highlight = new Map(); // node name -> Set(devices) of the job shown in the detail
    this.lastRenderMs = 0;
    this.width = 0;
    canvas.addEventListener('mousemove', (e) => this._onMove(e));
    canvas.addEventListener('mouseleave', () => this._hideTip());
    canvas.addEventListener('click', (e) => this._onClick(e));
    new ResizeObserver(() => {
      if (this.wrap.clientWidth !== this.width) this.render();
    }).observe(wrap);
  }

  /** New snapshot (``nodes`` of GET /snapshot) and the running jobs by id (for the tooltip). */
  setData(nodes, jobs) {
    this.nodes = nodes;
    this.jobs = jobs;
    const models = [...new Set(nodes.map((n) => n.gpu_model || CPU_ONLY))].sort((a, b) =>
      (a === CPU_ONLY) - (b === CPU_ONLY) || a.localeCompare(b));
    models.forEach((m) => {
      if (!this.colors.has(m)) this.colors.set(m, m === CPU_ONLY ? '#6b7280' : PALETTE[this.colors.size % PALETTE.length]);
    });
    this.models = models;
    this.render();
  }

  colorOf(model) {
    return this.colors.get(model || CPU_ONLY) || '#6b7280';
  }

  /** Per model: nodes, GPUs, used milli, cordoned nodes, unhealthy devices (for the legend). */
  summary() {
    const out = new Map((this.models || []).map((m) => [m, { model: m, color: this.colorOf(m), nodes: 0, gpus: 0, used: 0 }]));
    for (const n of this.nodes) {
      const s = out.get(n.gpu_model || CPU_ONLY);
      s.nodes += 1;
      s.gpus += n.gpu_used_milli.length;
      s.used += n.gpu_used_milli.reduce((a, b) => a + b, 0);
    }
    return [...out.values()];
  }

  /** Outline the devices of ``placement`` ([{node, devices}]) — the job open in the detail. */
  setHighlight(placement) {
    this.highlight = new Map((placement || []).map((p) => [p.node, new Set(p.devices)]));
    this.draw();
  }

  select(node, device = null) {
    this.selected = node ? { node, device } : null;
    this.draw();
    const tile = node && this.byName.get(node);
    if (tile) {
      const top = this.canvas.offsetTop + tile.y - 40;
      if (top < this.wrap.scrollTop || top > this.wrap.scrollTop + this.wrap.clientHeight - 60) this.wrap.scrollTop = top;
    }
  }

  /** The CSS-pixel rectangle of a device cell (relative to the canvas), for tests and tooltips. */
  cellRect(node, device) {
    const t = this.byName.get(node);
    if (!t) return null;
    const { cols, cell } = t.g;
    return {
      x: t.x + PAD + (device % cols) * (cell + GAP), y: t.y + PAD + Math.floor(device / cols) * (cell + GAP),
      w: cell, h: cell,
    };
  }

  // ------------------------------------------------------------ layout
  /** One section per GPU model; inside it one group per GPU count (each group's tiles have its shape). */
  _sections() {
    const by = new Map();
    for (const n of this.nodes) {
      const m = n.gpu_model || CPU_ONLY;
      if (!by.has(m)) by.set(m, []);
      by.get(m).push(n);
    }
    return (this.models || []).filter((m) => by.has(m)).map((m) => {
      const nodes = by.get(m);
      const counts = [...new Set(nodes.map((n) => n.gpu_used_milli.length))].sort((a, b) => b - a);
      const groups = counts.map((k) => {
        const cols = Math.max(1, Math.min(k, k > 16 ? 8 : 4));
        return { cols, rows: Math.max(1, Math.ceil(k / cols)), nodes: nodes.filter((n) => n.gpu_used_milli.length === k) };
      });
      return { model: m, nodes, groups };
    });
  }

  /** Place tiles for cell size ``cell`` in ``width``; returns the tiles and the total height. */
  _layout(sections, cell, width) {
    const labels = cell >= LABEL_CELL;
    let y = 0;
    const tiles = [];
    for (const sec of sections) {
      sec.y = y;
      y += HEAD;
      for (const g of sec.groups) {
        g.cell = cell;
        g.tw = 2 * PAD + g.cols * cell + (g.cols - 1) * GAP;
        g.th = 2 * PAD + g.rows * cell + (g.rows - 1) * GAP;
        const slotW = labels ? Math.max(g.tw, LABEL_W) : g.tw;
        const slotH = g.th + (labels ? LABEL_H : 0);
        const perRow = Math.max(1, Math.floor((width + TILE_GAP) / (slotW + TILE_GAP)));
        g.nodes.forEach((node, i) => {
          tiles.push({ node, g, labels, x: (i % perRow) * (slotW + TILE_GAP), y: y + Math.floor(i / perRow) * (slotH + TILE_GAP),
            w: g.tw, h: g.th, slotW });
        });
        y += Math.ceil(g.nodes.length / perRow) * (slotH + TILE_GAP) + GROUP_GAP;
      }
      y += SECTION_GAP - GROUP_GAP;
    }
    return { tiles, height: y };
  }

  // ------------------------------------------------------------ drawing
  /** Lay out and draw everything; returns (and keeps) the time it took in ms. */
  render() {
    const t0 = performance.now();
    const width = Math.max(200, this.wrap.clientWidth - 16);
    this.width = this.wrap.clientWidth;
    const sections = this._sections();
    const target = Math.max(360, window.innerHeight - this.wrap.getBoundingClientRect().top - 24);
    let cell = MAX_CELL;
    let lay = this._layout(sections, cell, width);
    while (cell > MIN_CELL && lay.height > target) {
      cell -= 1;
      lay = this._layout(sections, cell, width);
    }
    this.sections = sections;
    this.tiles = lay.tiles;
    this.byName = new Map(lay.tiles.map((t) => [t.node.name, t]));
    const height = Math.max(lay.height, 40);
    const dpr = window.devicePixelRatio || 1;
    const { canvas, ctx } = this;
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    this._size = { width, height, dpr };
    this.draw();
    this.lastRenderMs = performance.now() - t0;
    return this.lastRenderMs;
  }

  /** Redraw with the current layout (hover, selection, highlight). */
  draw() {
    if (!this._size) return;
    const { ctx } = this;
    const { width, height, dpr } = this._size;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, width, height);
    this._drawHeaders(this.sections);
    for (const t of this.tiles) this._drawTile(t);
    if (!this.nodes.length) {
      ctx.fillStyle = '#6b7280';
      ctx.font = '13px system-ui, sans-serif';
      ctx.fillText('No nodes registered.', 4, 20);
    }
  }

  _drawHeaders(sections) {
    const ctx = this.ctx;
    ctx.textBaseline = 'middle';
    for (const sec of sections) {
      const gpus = sec.nodes.reduce((a, n) => a + n.gpu_used_milli.length, 0);
      const used = sec.nodes.reduce((a, n) => a + n.gpu_used_milli.reduce((x, y) => x + y, 0), 0);
      const cy = sec.y + HEAD / 2 - 2;
      ctx.fillStyle = this.colorOf(sec.model);
      ctx.fillRect(0, cy - 5, 10, 10);
      ctx.fillStyle = '#111827';
      ctx.font = '600 13px system-ui, sans-serif';
      ctx.fillText(sec.model, 16, cy);
      const w = ctx.measureText(sec.model).width;
      ctx.fillStyle = '#4b5563';
      ctx.font = '12px system-ui, sans-serif';
      const pct = gpus ? ` · ${(used / gpus / 10).toFixed(1)}% allocated` : '';
      const shapes = sec.groups.length > 1 ? ` (${sec.groups.map((g) => `${g.nodes.length}×${g.nodes[0].gpu_used_milli.length}`).join(', ')})` : '';
      ctx.fillText(`${sec.nodes.length} nodes${shapes} · ${gpus} GPUs${pct}`, 16 + w + 10, cy);
    }
  }

  _drawTile(t) {
    const { ctx } = this;
    const { node, g } = t;
    const color = this.colorOf(node.gpu_model);
    const cell = g.cell;
    // node background: grey; cordoned: amber with a dark amber border
    ctx.fillStyle = node.cordoned ? '#fcd9a6' : '#e5e7eb';
    ctx.fillRect(t.x, t.y, t.w, t.h);
    if (node.cordoned) {
      ctx.strokeStyle = '#92400e';
      ctx.lineWidth = 1;
      ctx.setLineDash([2, 2]);
      ctx.strokeRect(t.x + 0.5, t.y + 0.5, t.w - 1, t.h - 1);
      ctx.setLineDash([]);
    }
    const used = node.gpu_used_milli;
    const healthy = node.gpu_healthy || [];
    const hl = this.highlight.get(node.name);
    const light = tint(color, 0.78);
    if (!used.length) { // CPU-only node: show CPU use as a grey fill
      const frac = node.cpu_milli ? node.cpu_used_milli / node.cpu_milli : 0;
      this._cell(t.x + PAD, t.y + PAD, cell, frac, color, light);
    }
    for (let d = 0; d < used.length; d++) {
      const x = t.x + PAD + (d % g.cols) * (cell + GAP);
      const y = t.y + PAD + Math.floor(d / g.cols) * (cell + GAP);
      if (healthy[d] === false) {
        ctx.fillStyle = '#fde2e2';
        ctx.fillRect(x, y, cell, cell);
        ctx.strokeStyle = UNHEALTHY;
        ctx.lineWidth = Math.max(1.2, cell / 6);
        ctx.beginPath();
        ctx.moveTo(x + 1, y + 1); ctx.lineTo(x + cell - 1, y + cell - 1);
        ctx.moveTo(x + cell - 1, y + 1); ctx.lineTo(x + 1, y + cell - 1);
        ctx.stroke();
      } else {
        this._cell(x, y, cell, used[d] / 1000, color, light);
      }
      if (hl && hl.has(d)) {
        ctx.strokeStyle = HIGHLIGHT;
        ctx.lineWidth = 2;
        ctx.strokeRect(x - 1, y - 1, cell + 2, cell + 2);
      }
      if (this.selected && this.selected.node === node.name && this.selected.device === d) {
        ctx.strokeStyle = SELECT;
        ctx.lineWidth = 1.5;
        ctx.strokeRect(x - 0.75, y - 0.75, cell + 1.5, cell + 1.5);
      }
    }
    if (t.labels) {
      ctx.fillStyle = '#374151';
      ctx.font = '11px system-ui, sans-serif';
      ctx.textBaseline = 'top';
      let name = node.name;
      while (name.length > 3 && ctx.measureText(name).width > t.slotW) name = name.slice(0, -2);
      ctx.fillText(name === node.name ? name : `${name}…`, t.x, t.y + t.h + 2);
    }
    const isSel = this.selected && this.selected.node === node.name;
    if (isSel || this.hover === t) {
      ctx.strokeStyle = isSel ? SELECT : '#6b7280';
      ctx.lineWidth = isSel ? 2 : 1;
      ctx.strokeRect(t.x - 1, t.y - 1, t.w + 2, t.h + 2);
    }
  }

  /** A device cell: light tint, filled from the bottom by ``frac`` in the model's colour. */
  _cell(x, y, size, frac, color, light) {
    const { ctx } = this;
    ctx.fillStyle = light;
    ctx.fillRect(x, y, size, size);
    if (frac > 0) {
      const h = Math.max(1, Math.round(size * Math.min(1, frac)));
      ctx.fillStyle = color;
      ctx.fillRect(x, y + size - h, size, h);
    }
  }

  // ------------------------------------------------------------ interaction
  _hit(e) {
    const r = this.canvas.getBoundingClientRect();
    const mx = e.clientX - r.left;
    const my = e.clientY - r.top;
    for (const t of this.tiles) {
      if (mx >= t.x && mx < t.x + t.w && my >= t.y && my < t.y + t.h) {
        const { cols, cell } = t.g;
        const cx = Math.floor((mx - t.x - PAD) / (cell + GAP));
        const cy = Math.floor((my - t.y - PAD) / (cell + GAP));
        const d = cy * cols + cx;
        const device = cx >= 0 && cx < cols && cy >= 0 && d < t.node.gpu_used_milli.length ? d : null;
        return { tile: t, device, mx, my };
      }
    }
    return null;
  }

  _onMove(e) {
    const hit = this._hit(e);
    const tile = hit ? hit.tile : null;
    if (tile !== this.hover) {
      this.hover = tile;
      this.draw();
    }
    if (!hit) { this._hideTip(); return; }
    this.canvas.style.cursor = 'pointer';
    this.tip.innerHTML = this._tipHtml(hit.tile.node, hit.device);
    this.tip.hidden = false;
    // fixed to the viewport, flipped to stay inside it
    const tw = this.tip.offsetWidth;
    const th = this.tip.offsetHeight;
    let x = e.clientX + 14;
    let y = e.clientY + 14;
    if (x + tw > window.innerWidth - 4) x = e.clientX - tw - 14;
    if (y + th > window.innerHeight - 4) y = e.clientY - th - 14;
    this.tip.style.left = `${Math.max(4, x)}px`;
    this.tip.style.top = `${Math.max(4, y)}px`;
  }

  _hideTip() {
    this.tip.hidden = true;
    this.canvas.style.cursor = '';
    if (this.hover) { this.hover = null; this.draw(); }
  }

  _onClick(e) {
    const hit = this._hit(e);
    if (!hit) return;
    this.select(hit.tile.node.name, hit.device);
    this.onSelect({ node: hit.tile.node, device: hit.device });
  }

  _tipHtml(node, device) {
    const rows = node.gpu_used_milli.map((u, d) => {
      const bad = node.gpu_healthy && node.gpu_healthy[d] === false;
      const cls = d === device ? ' class="cur"' : '';
      return `<tr${cls}><td>GPU ${d}</td><td class="num">${u}m</td><td>${bad ? '<span class="bad">unhealthy</span>' : ''}</td></tr>`;
    }).join('');
    const jobs = (node.jobs || []).slice(0, 8).map((id) => {
      const j = this.jobs.get(id);
      return `<li>#${id}${j ? ` ${esc(j.name)} <span class="muted">(${esc(j.team)})</span>` : ''}</li>`;
    }).join('');
    const more = node.jobs && node.jobs.length > 8 ? `<li class="muted">+${node.jobs.length - 8} more</li>` : '';
    return `<div class="tip-title">${esc(node.name)}</div>
      <div class="tip-sub">${esc(node.gpu_model || CPU_ONLY)}${node.cordoned ? ' · <b class="warn">cordoned</b>' : ''}</div>
      ${rows ? `<table class="tip-table">${rows}</table>` : ''}
      <div class="tip-sub">CPU ${(node.cpu_used_milli / 1000).toFixed(1)} / ${(node.cpu_milli / 1000).toFixed(0)} cores ·
        mem ${fmtMiB(node.memory_used_mib)} / ${fmtMiB(node.memory_mib)}</div>
      <div class="tip-sub">${node.jobs && node.jobs.length ? 'Jobs:' : 'No jobs'}</div>
      ${jobs || more ? `<ul class="tip-jobs">${jobs}${more}</ul>` : ''}`;
  }
}

/** The legend: one swatch per GPU model with counts, and the marks. */
export function legendHtml(summary) {
  const models = summary.map((s) => `<span class="key"><i class="sw" style="background:${s.color}"></i>
    <b>${esc(s.model)}</b> <span class="muted">${s.nodes} nodes${s.gpus ? ` · ${s.gpus} GPUs` : ''}</span></span>`).join('');
  return `${models}
    <span class="key"><i class="sw sw-fill"></i>fill = used share of a GPU</span>
    <span class="key"><i class="sw sw-bad"></i>unhealthy GPU</span>
    <span class="key"><i class="sw sw-cordon"></i>cordoned node</span>
    <span class="key"><i class="sw sw-hl"></i>selected job</span>`;
}
