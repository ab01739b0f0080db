// traceprof diff view: two traces' module trees as icicles side by side on one scale (base,
// new), a third icicle coloured by the change (red: slower, green: faster, grey: within the
// step-to-step spread), and the nodes that changed most with the kernels or ops inside them.
// Inlined after index.js into the HTML page of `traceprof diff -o diff.html`
// (traceprof/render/diff_html.py): it uses index.js's helpers (el, duration, percent, signed)
// and loads nothing. The data is the diff's JSON document (docs/diff.md).

const DIFF_ROW = 22;
const DIFF_LEVELS = 10;
const DIFF_TABLE_ROWS = 50;

const signedDuration = (us) => signed(us, duration);
const signedPercent = (fraction) => signed(fraction, percent);

function deltaColor(node) {
  if (node.status === 'added') return '#d9534f';
  if (node.status === 'removed') return '#5cb85c';
  if (node.noise || !node.delta_us) return '#d0d0d0';
  const base = Math.max(node.base_us, 1e-9);
  const strength = Math.min(1, Math.abs(node.delta_us) / base);
  const light = Math.round(90 - 45 * strength);
  return node.delta_us > 0 ? `hsl(0, 70%, ${light}%)` : `hsl(120, 45%, ${light}%)`;
}

// a module whose work moved into a kernel fused across modules on an ancestor (a compiled
// model): "fused into transformer.h.0" on that side, where -100% would read as gone
function fusedInto(node) {
  if (node.new_fused_into && !node.new_us && node.base_us > 0) return {side: 'new', into: node.new_fused_into};
  if (node.base_fused_into && !node.base_us && node.new_us > 0) return {side: 'base', into: node.base_fused_into};
  return null;
}

function nodeTitle(node) {
  const name = node.qualified_name || node.class_name || node.name;
  const status = node.status === 'matched' ? '' : ` [${node.status}]`;
  const fused = fusedInto(node);
  if (fused) {
    const base = fused.side === 'base' ? `fused into ${fused.into}` : duration(node.base_us);
    const next = fused.side === 'new' ? `fused into ${fused.into}` : duration(node.new_us);
    return `${name}${status}: ${base} -> ${next}`;
  }
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

// the class that colours a change: slower is worse, faster better, within the spread neither
function changeClass(node) {
  if (node.noise || !node.delta_us) return 'tp-diff-same';
  return node.delta_us > 0 ? 'tp-worse' : 'tp-better';
}

function changeText(node) {
  const pct = signedPercent(node.delta_ratio);
  return `${signedDuration(node.delta_us)}${pct ? ` (${pct})` : ''}`;
}

// the largest changes; names: node key -> short name, told apart among every node of the whole
// diff (traceprof/render/diff_html.py), not only the rows shown
function diffTable(doc, names) {
  const rows = doc.nodes.filter((n) => n.delta_us).sort((a, b) => Math.abs(b.delta_us) - Math.abs(a.delta_us))
      .slice(0, DIFF_TABLE_ROWS);
  const num = (text, cls = '') => el('td', {class: `tp-num ${cls}`}, text);
  const table = el('table', {class: 'tp-ops tp-diff-table'},
      el('thead', {}, el('tr', {},
          ...[['Node'], ['Status'], ['Base', 1], ['New', 1], ['Δ', 1], ['Δ %', 1], ['Spread', 1], ['Changed most inside']]
              .map(([h, isNum]) => el('th', {class: isNum ? 'tp-num' : null}, h)))));
  const body = el('tbody');
  rows.forEach((n) => {
    const inside = n.inside.map((d) => el('span', {class: 'tp-diff-inside-item'},
        `${d.name} (${d.pass}${d.status === 'matched' ? '' : ', ' + d.status}) `,
        el('span', {class: d.delta_us > 0 ? 'tp-worse' : 'tp-better'}, signedDuration(d.delta_us))));
    const change = changeClass(n);
    body.append(el('tr', {class: n.noise ? 'tp-diff-noise' : (n.delta_us > 0 ? 'tp-diff-slower' : 'tp-diff-faster'),
      'data-key': n.key},
    el('td', {class: 'tp-diff-node', title: n.qualified_name || n.name}, names[n.key] || n.name || n.class_name),
    el('td', {}, n.status),
    num(fusedInto(n)?.side === 'base' ? `fused into ${n.base_fused_into}` : duration(n.base_us)),
    num(fusedInto(n)?.side === 'new' ? `fused into ${n.new_fused_into}` : duration(n.new_us)),
    num(signedDuration(n.delta_us), `tp-diff-delta-cell ${change}`),
    num(fusedInto(n) ? 'fused' : signedPercent(n.delta_ratio), change),
    num(n.spread_us === null ? '--' : duration(n.spread_us)),
    el('td', {class: 'tp-diff-inside'}, inside)));
  });
  table.append(body);
  return el('div', {class: 'tp-ops-wrap tp-diff-table-wrap'}, table);
}

function diffCards(doc) {
  const step = doc.step;
  const side = (s) => el('span', {title: s.path}, `${s.path.split('/').pop()} · ${s.device}`);
  const wall = `${signedDuration(step.wall_delta_us)} (${signedPercent(step.wall_delta_ratio)})`;
  const cards = [
    ['Base', side(doc.base)],
    ['New', side(doc.new)],
    ['Step wall', `${duration(doc.base.wall_us)} → ${duration(doc.new.wall_us)}`],
    ['Change', el('span', {id: 'tp-diff-step', class: changeClass({delta_us: step.wall_delta_us,
      noise: step.wall_spread_us !== null && Math.abs(step.wall_delta_us) <= step.wall_spread_us})}, wall)],
    ['Step-to-step spread', step.wall_spread_us === null ? '--' : duration(step.wall_spread_us)],
    // wraps instead of being cut off: every part of the change is read
    ['Where', Object.entries(step.where).map(([k, v]) => `${k} ${signedDuration(v)}`).join(' · '), 'tp-card-wrap'],
  ];
  return el('section', {class: 'tp-summary'},
      el('div', {class: 'tp-cards'}, cards.map(([k, v, wrap]) =>
        el('div', {class: wrap ? `tp-card ${wrap}` : 'tp-card'}, el('div', {class: 'tp-card-key'}, k),
            el('div', {class: 'tp-card-value', title: typeof v === 'string' ? v : v.title}, v)))),
      doc.warnings.map((w) => el('div', {class: 'tp-warning tp-diff-warning'}, `⚠ warning: ${w}`)));
}

export function renderDiff(doc, {title = null, footer = null, short_names: shortNames = null} = {}) {
  document.body.classList.add('tp-body');
  const what = doc.metric === 'gpu_busy_us' ? 'GPU busy time' : 'CPU time';
  const charts = el('div', {class: 'tp-diff-charts'});
  const panel = (heading, hint, ...content) => el('section', {class: 'tp-panel'},
      el('div', {class: 'tp-panel-head'}, el('h2', {}, heading), hint ? el('span', {class: 'tp-hint'}, hint) : null),
      ...content);
  const app = el('div', {class: 'tp-app', id: 'traceprof-diff-page'},
      el('header', {class: 'tp-toolbar'}, el('span', {class: 'tp-brand'}, 'traceprof diff'),
          el('span', {class: 'tp-title', title: title || ''}, title || '')),
      diffCards(doc),
      panel('Module time', `${what} per step, base and new on one scale; click a box to zoom in, again to zoom out`,
          charts),
      panel('Largest changes', `the ${DIFF_TABLE_ROWS} nodes whose ${what} changed most; grey: within the ` +
          'step-to-step spread', diffTable(doc, shortNames || {})),
      footer ? el('footer', {class: 'tp-footer'}, footer) : null);
  document.body.append(app);
  const byId = new Map(doc.nodes.map((n) => [n.id, n]));
  const draw = (focus) => {
    const width = Math.max(320, charts.clientWidth - 2);
    const half = Math.floor((width - 16) / 2);
    const roots = focus === null ? doc.roots : [focus];
    const sum = (f) => roots.reduce((s, r) => s + f(byId.get(r)), 0);
    const scale = half / Math.max(sum((n) => n.base_us), sum((n) => n.new_us), 1e-9);
    const deltaScale = width / Math.max(sum((n) => Math.max(n.base_us, n.new_us)), 1e-9);
    const pick = (node) => draw(node.id === focus ? null : node.id);
    const node = focus === null ? null : byId.get(focus);
    const zoom = node === null ? 'the whole step' : (node.qualified_name || node.name);
    const head = (label, total) => el('div', {class: 'tp-pass-head'}, el('span', {class: 'tp-pass-name'}, label),
        el('span', {class: 'tp-pass-time'}, duration(total)));
    charts.replaceChildren(
        el('div', {class: 'tp-crumbs tp-diff-zoom'}, `Showing ${zoom} `,
            focus === null ? null : el('button', {class: 'tp-button', id: 'tp-diff-reset', onclick: () => draw(null)},
                'Whole step')),
        el('div', {class: 'tp-diff-pair'},
            el('div', {class: 'tp-pass tp-pass-forward', style: `width:${half}px`}, head('Base', sum((n) => n.base_us)),
                icicle(doc, roots, (n) => n.base_us, () => '#8fb9e0', scale, 'tp-diff-base', pick)),
            el('div', {class: 'tp-pass tp-pass-backward', style: `width:${half}px`}, head('New', sum((n) => n.new_us)),
                icicle(doc, roots, (n) => n.new_us, () => '#f2b880', scale, 'tp-diff-new', pick))),
        el('div', {class: 'tp-pass-head tp-diff-change-head'}, el('span', {class: 'tp-pass-name'}, 'Change'),
            el('span', {class: 'tp-pass-time'}, 'width: the larger of base and new;'),
            el('span', {class: 'tp-diff-key', style: 'background: hsl(0, 70%, 55%)'}), 'slower',
            el('span', {class: 'tp-diff-key', style: 'background: hsl(120, 45%, 55%)'}), 'faster',
            el('span', {class: 'tp-diff-key', style: 'background: #d0d0d0'}), 'within the spread'),
        icicle(doc, roots, (n) => Math.max(n.base_us, n.new_us), deltaColor, deltaScale,
            'tp-diff-delta', pick));
  };
  draw(null);
  document.title = title ? `traceprof diff · ${title}` : 'traceprof diff';
  window.traceprofDiff = doc;
}
