// traceprof diff view: two traces' module trees as icicles side by side on one scale (base,
// new), a third icicle coloured by the change (red: slower, green: faster, grey: within the
// step-to-step spread), and the nodes that changed most with the kernels or ops inside them.
// Inlined after index.js into the HTML page of `traceprof diff -o diff.html`
// (traceprof/render/diff_html.py): it uses index.js's helpers (el, duration, percent, count)
// and loads nothing. The data is the diff's JSON document (docs/diff.md).

const DIFF_ROW = 22;
const DIFF_LEVELS = 10;

function signedDuration(us) {
  const text = duration(us);
  return us > 0 ? `+${text}` : text;
}

function signedPercent(fraction) {
  if (fraction === null || fraction === undefined) return '';
  const text = percent(fraction);
  return fraction > 0 ? `+${text}` : text;
}

function deltaColor(node) {
  if (node.status === 'added') return '#d9534f';
  if (node.status === 'removed') return '#5cb85c';
  if (node.noise || !node.delta_us) return '#d0d0d0';
  const base = Math.max(node.base_us, 1e-9);
  const strength = Math.min(1, Math.abs(node.delta_us) / base);
  const light = Math.round(90 - 45 * strength);
  return node.delta_us > 0 ? `hsl(0, 70%, ${light}%)` : `hsl(120, 45%, ${light}%)`;
}

function nodeTitle(node) {
  const name = node.qualified_name || node.class_name || node.name;
  const status = node.status === 'matched' ? '' : ` [${node.status}]`;
  const pct = signedPercent(node.delta_ratio);
  return `${name}${status}: ${duration(node.base_us)} -> ${duration(node.new_us)} ` +
      `(${signedDuration(node.delta_us)}${pct ? ' ' + pct : ''})` + (node.noise ? ' (noise)' : '');
}

// One icicle: each node a box of width value(node) * scale, children under their parent, from
// the nodes `roots`; a click on a box calls onPick(node).
function icicle(doc, roots, value, color, scale, cls, onPick) {
  const byId = new Map(doc.nodes.map((n) => [n.id, n]));
  const box = el('div', {class: `tp-diff-icicle ${cls}`});
  let maxDepth = 0;
  const place = (id, x, depth) => {
    const node = byId.get(id);
    const w = value(node) * scale;
    if (w < 0.5 || depth >= DIFF_LEVELS) return;
    maxDepth = Math.max(maxDepth, depth);
    const cell = el('div', {
      class: 'tp-diff-cell', title: nodeTitle(node), 'data-key': node.key,
      style: `left:${x}px;top:${depth * DIFF_ROW}px;width:${Math.max(w - 1, 0)}px;` +
          `height:${DIFF_ROW - 1}px;background:${color(node)}`,
      onclick: () => onPick(node),
    }, w > 40 ? (node.name || node.class_name) : '');
    box.append(cell);
    let cx = x;
    for (const c of node.children) {
      place(c, cx, depth + 1);
      cx += value(byId.get(c)) * scale;
    }
  };
  let x = 0;
  for (const r of roots) {
    place(r, x, 0);
    x += value(byId.get(r)) * scale;
  }
  box.style.height = `${(maxDepth + 1) * DIFF_ROW}px`;
  return box;
}

function diffTable(doc) {
  const rows = doc.nodes.filter((n) => n.delta_us).sort((a, b) => Math.abs(b.delta_us) - Math.abs(a.delta_us));
  const table = el('table', {class: 'tp-diff-table'},
      el('thead', {}, el('tr', {}, ...['Node', 'Status', 'Base', 'New', 'Δ', 'Δ %', 'Spread', 'Changed most inside']
          .map((h) => el('th', {}, h)))));
  const body = el('tbody');
  for (const n of rows.slice(0, 50)) {
    const inside = n.inside.map((d) => `${d.name} (${d.pass}${d.status === 'matched' ? '' : ', ' + d.status}) ` +
        `${signedDuration(d.delta_us)}`).join('; ');
    body.append(el('tr', {class: n.noise ? 'tp-diff-noise' : (n.delta_us > 0 ? 'tp-diff-slower' : 'tp-diff-faster')},
        el('td', {}, n.qualified_name || n.class_name || n.name), el('td', {}, n.status),
        el('td', {}, duration(n.base_us)), el('td', {}, duration(n.new_us)),
        el('td', {}, signedDuration(n.delta_us)), el('td', {}, signedPercent(n.delta_ratio)),
        el('td', {}, n.spread_us === null ? '--' : duration(n.spread_us)), el('td', {}, inside)));
  }
  table.append(body);
  return table;
}

export function renderDiff(doc, {title = null, footer = null} = {}) {
  const root = document.body;
  const width = Math.max(320, Math.min(window.innerWidth - 48, 1400));
  const half = Math.floor((width - 16) / 2);
  const what = doc.metric === 'gpu_busy_us' ? 'GPU busy time' : 'CPU time';
  const step = doc.step;
  const summary = el('div', {class: 'tp-diff-summary'},
      el('h1', {}, title || 'traceprof diff'),
      el('div', {}, `base: ${doc.base.path} (${doc.base.device})`),
      el('div', {}, `new: ${doc.new.path} (${doc.new.device})`),
      el('div', {id: 'tp-diff-step'}, `step wall ${duration(doc.base.wall_us)} -> ${duration(doc.new.wall_us)} ` +
          `(${signedDuration(step.wall_delta_us)} ${signedPercent(step.wall_delta_ratio)})` +
          (step.wall_spread_us !== null ? `, spread ${duration(step.wall_spread_us)}` : '')),
      el('div', {}, 'where: ' + Object.entries(step.where).map(([k, v]) => `${k} ${signedDuration(v)}`).join(', ')),
      ...doc.warnings.map((w) => el('div', {class: 'tp-diff-warning'}, `warning: ${w}`)));
  const charts = el('div', {class: 'tp-diff-charts'});
  const byId = new Map(doc.nodes.map((n) => [n.id, n]));
  const draw = (focus) => {
    const roots = focus === null ? doc.roots : [focus];
    const sum = (f) => roots.reduce((s, r) => s + f(byId.get(r)), 0);
    const scale = half / Math.max(sum((n) => n.base_us), sum((n) => n.new_us), 1e-9);
    const deltaScale = width / Math.max(sum((n) => Math.max(n.base_us, n.new_us)), 1e-9);
    const pick = (node) => draw(node.id === focus ? null : node.id);
    const zoom = focus === null ? 'the whole step' : (byId.get(focus).qualified_name || byId.get(focus).name);
    charts.replaceChildren(
        el('div', {class: 'tp-diff-zoom'}, `Showing ${zoom} (click a box to zoom in, again to zoom out) `,
            focus === null ? null : el('button', {id: 'tp-diff-reset', onclick: () => draw(null)}, 'Whole step')),
        el('div', {class: 'tp-diff-pair', style: 'display:flex;gap:16px'},
            el('div', {style: `width:${half}px`}, el('h2', {}, `Base (${what})`),
                icicle(doc, roots, (n) => n.base_us, () => '#8fb9e0', scale, 'tp-diff-base', pick)),
            el('div', {style: `width:${half}px`}, el('h2', {}, `New (${what})`),
                icicle(doc, roots, (n) => n.new_us, () => '#f2b880', scale, 'tp-diff-new', pick))),
        el('h2', {}, 'Change (width: the larger of base and new; red slower, green faster, ' +
            'grey within the spread)'),
        icicle(doc, roots, (n) => Math.max(n.base_us, n.new_us), deltaColor, deltaScale,
            'tp-diff-delta', pick));
  };
  draw(null);
  root.append(summary, charts, el('h2', {}, 'Largest changes'), diffTable(doc),
      footer ? el('div', {class: 'tp-footer'}, footer) : null);
  document.title = title ? `traceprof diff · ${title}` : 'traceprof diff';
  window.traceprofDiff = doc;
}
