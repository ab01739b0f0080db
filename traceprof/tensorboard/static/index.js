// traceprof frontend: module tree, icicle chart, run and step selectors. Two hosts use it:
// - the TensorBoard plugin: TensorBoard loads this ES module in an iframe whose <base> is
//   /data/plugin/traceprof/ and calls render(), which reads the runs and profiles from the
//   plugin's routes (tensorboardSource);
// - the HTML report (traceprof/render/html.py): this file and style.css are inlined into one
//   page with the profile embedded, and renderReport(doc) shows it (inlineSource), no network.
// Self-contained (no libraries). The data is traceprof's JSON profile (docs/output-formats.md);
// fields added to it later (FLOPs, ...) appear as extra columns. Number formatting mirrors
// traceprof/render/units.py.

const SVG_NS = 'http://www.w3.org/2000/svg';
const TIME_FIELDS = new Set(['gpu_busy_us', 'gpu_work_us', 'cpu_us', 'kernels']);
const KNOWN_NODE_FIELDS = new Set([
  'id', 'parent', 'depth', 'kind', 'name', 'class_name', 'qualified_name', 'calls',
  'share_of_step', 'params_total', 'params', 'input_shapes', 'output_shapes', 'extra_repr',
  'children', 'path',
]);
const METRICS = {
  gpu_busy_us: 'GPU busy time',
  gpu_work_us: 'GPU work (sum of kernel time)',
  cpu_us: 'CPU time',
};
const PALETTE = ['#8fb9e0', '#f2b880', '#9dd3a8', '#e9a3a3', '#c3b1e1', '#d9c2a0', '#f4c2dc',
  '#b5c7d3', '#dfe39a', '#9fd8d8'];
const ROW_HEIGHT = 22;
const MAX_ICICLE_LEVELS = 12;
const OPS_SHOWN = 25;      // rows of the ops table shown
const SPLIT_GAP = 16;        // px between the forward and the backward icicle
const MIN_PASS_WIDTH = 220;  // px: the narrowest a pass's icicle gets

// ---- formatting (the rules of traceprof/render/units.py) -------------------------------------

export function duration(us) {
  const a = Math.abs(us);
  if (!a) return '0';
  if (a < 1000) return `${us.toFixed(1)} us`;
  if (a < 1e6) return `${(us / 1000).toFixed(2)} ms`;
  return `${(us / 1e6).toFixed(2)} s`;
}

export function percent(fraction) {
  if (!fraction) return '0%';
  if (Math.abs(fraction) < 0.001) return '<0.1%';
  return `${(fraction * 100).toFixed(1)}%`;
}

// A signed number as traceprof/render/units.py writes it: the magnitude by `format` (duration,
// percent), '+' or '-' before it, no sign on zero ('0', '0%'); a tiny change keeps its sign
// ('-<0.1%').
export function signed(value, format = duration) {
  if (value === null || value === undefined) return '';
  const text = format(Math.abs(value));
  if (text === format(0)) return text;
  return `${value < 0 ? '-' : '+'}${text}`;
}

export function count(value) {
  if (value === null || value === undefined) return '--';
  if (Number.isInteger(value)) return value.toLocaleString('en-US');
  return value.toLocaleString('en-US', {minimumFractionDigits: 1, maximumFractionDigits: 1});
}

export function bigNumber(value, unit = '') {
  if (value === null || value === undefined) return '--';
  for (const [div, suffix] of [[1e15, ' P'], [1e12, ' T'], [1e9, ' G'], [1e6, ' M'], [1e3, ' k']]) {
    if (Math.abs(value) >= div) return `${(value / div).toFixed(2)}${suffix}${unit}`;
  }
  return `${Math.round(value)}${unit ? ' ' + unit : ''}`;
}

// Short display names (the rule of traceprof/result/names.py; the diff and job pages embed the
// names Python computed, so this serves the pages that hold a whole tree and no names: the
// single-trace report and the TensorBoard tab). A node's parts are its parent's and its own
// (ownParts); its short name is the shortest tail of whole parts that no other distinct node's
// path shares, never starting at an index (h.2, not 2; ASCII digits, as Python).
function ownParts(name, qualified, parentQualified) {
  if (parentQualified !== null && parentQualified !== undefined) {
    const below = parentQualified ? `${parentQualified}.` : '';
    const rest = qualified.startsWith(below) ? qualified.slice(below.length) : '';
    if (rest !== name && rest.endsWith(`.${name}`)) return rest.split('.');  // levels of no node
  }
  return [name];
}

export function shortNames(paths) {
  const parts = paths.map((p) => p.map(String));
  const widened = (p, n) => { while (n < p.length && /^[0-9]+$/.test(p[p.length - n])) n += 1; return n; };
  const k = parts.map((p) => widened(p, 1));
  const tail = (i) => JSON.stringify(parts[i].slice(-k[i]));
  let pending = parts.map((_, i) => i);
  while (pending.length) {
    const owners = new Map();
    parts.forEach((p, i) => {
      if (!owners.has(tail(i))) owners.set(tail(i), new Set());
      owners.get(tail(i)).add(JSON.stringify(p));
    });
    pending = pending.filter((i) => owners.get(tail(i)).size > 1 && k[i] < parts[i].length);
    for (const i of pending) k[i] = widened(parts[i], k[i] + 1);
  }
  return parts.map((p, i) => p.slice(-k[i]).join('.'));
}

// The short names of a whole tree's nodes ({name, qualified_name, parent}; idOf gives a node's
// id, which its children's `parent` holds): a Map from id to short name.
export function treeShortNames(nodes, idOf = (n) => n.id) {
  const byId = new Map(nodes.map((n) => [idOf(n), n]));
  const paths = new Map();
  const pathOf = (n) => {
    if (!paths.has(idOf(n))) {
      const up = byId.get(n.parent);
      const own = ownParts(n.name || n.class_name || '', n.qualified_name || '', up ? up.qualified_name || '' : null);
      paths.set(idOf(n), up && up !== n ? [...pathOf(up), ...own] : own);
    }
    return paths.get(idOf(n));
  };
  const shorts = shortNames(nodes.map(pathOf));
  return new Map(nodes.map((n, i) => [idOf(n), shorts[i]]));
}

export function shape(spec) {
  if (spec === null || spec === undefined) return '--';
  if (Array.isArray(spec)) {
    const inner = spec.filter((s) => s !== null && s !== undefined).map(shape);
    if (inner.length === 1) return inner[0];
    return inner.length ? `(${inner.join(', ')})` : '--';
  }
  if (typeof spec === 'object') {
    if (Array.isArray(spec.shape)) return `[${spec.shape.join(', ')}]`;
    const keys = Object.keys(spec);
    if (keys.length === 1 && keys[0] === 'kwargs') return shape(spec.kwargs);
    return `{${keys.map((k) => `${k}: ${shape(spec[k])}`).join(', ')}}`;
  }
  return '--';
}

const FIELD_LABELS = {
  flops: 'FLOPs', macs: 'MACs', bytes_read: 'bytes read', bytes_written: 'bytes written',
  unsupported_ops: 'unsupported ops', flop_per_s: 'FLOP/s', mfu: 'MFU', bytes_per_s: 'bytes/s',
  bandwidth_use: 'bandwidth use',
};

function formatField(field, value) {
  if (typeof value !== 'number') return value === null || value === undefined ? '--' : String(value);
  if (value === 0) return '0';
  if (/flop_per_s$/.test(field)) return bigNumber(value, 'FLOP/s');
  if (/bytes_per_s$/.test(field)) return bigNumber(value, 'B/s');
  if (/flops$/.test(field)) return bigNumber(value, 'FLOP');
  if (/macs$/.test(field)) return bigNumber(value, 'MAC');
  if (/_us$/.test(field)) return duration(value);
  if (/bytes(_read|_written)?$/.test(field)) return bigNumber(value, 'B');
  if (/(ratio|fraction|mfu|_use|utilization)$/.test(field)) return percent(value);
  return Number.isInteger(value) ? count(value) : bigNumber(value);
}

function title(field) {
  if (FIELD_LABELS[field]) return FIELD_LABELS[field];
  return field.replace(/_/g, ' ').replace(/\bus\b/, '(us)');
}

function capitalized(text) {
  return text.replace(/^[a-z]/, (c) => c.toUpperCase());
}

// ---- small DOM helpers -----------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// replaceChildren that leaves out null, undefined and false, as el() does (the DOM's own
// replaceChildren writes them as the text "null")
function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

async function fetchJson(url) {
  const response = await fetch(url, {cache: 'no-cache'});
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

// ---- data sources: where the runs and their profiles come from -------------------------------
// runs(): the run index entries ({name, steps: [{step}], mean_of_steps}); profile(run, step): the
// JSON profile of a run, the mean of its steps (step 'mean') or one step.

export function tensorboardSource() {
  return {
    async runs() {
      return (await fetchJson('runs')).runs || [];
    },
    profile(run, step) {
      return fetchJson(`profile?run=${encodeURIComponent(run)}&step=${encodeURIComponent(step)}`);
    },
  };
}

// One profile held in memory: a single run named `name`, no per-step profiles.
export function inlineSource(doc, name = 'profile') {
  const run = {name, steps: [], mean_of_steps: (doc.steps && doc.steps.numbers) || []};
  return {
    async runs() { return [run]; },
    async profile() { return doc; },
  };
}

// The per-step table (run.json per_step, traceprof/tensorboard/events.py per_step_table): the
// labels of the step's metrics (tag "<metric>/step"), and a value in its unit
const STEP_METRICS = {gpu_busy_us: 'GPU busy', cpu_us: 'CPU', wall_us: 'Wall', kernels: 'Kernels',
  tflops: 'Achieved', mfu: 'MFU'};

function perStepValue(unit, value) {
  if (typeof value !== 'number') return '--';
  if (unit === 'us') return duration(value);
  if (unit === 'count') return count(value);
  if (unit === 'TFLOP/s') return bigNumber(value * 1e12, 'FLOP/s');
  if (unit === 'fraction') return percent(value);
  return String(value);
}

// the class name, unless the display name already says it (nn.Module sources: "Linear_3")
function classSuffix(node) {
  const cls = node.class_name || '';
  return cls && cls !== node.name && !(node.name || '').startsWith(cls) ? cls : '';
}

function colorOf(node) {
  if (node.kind !== 'module') return node.kind === 'others' ? '#e4e4e4' : '#d4d4d4';
  let h = 0;
  for (const ch of node.class_name || node.name) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return PALETTE[h % PALETTE.length];
}

// ---- the view ----------------------------------------------------------------------------------

// the passes of the profile (traceprof.result.model.Pass): field prefix, label, short label; 'other'
// is work that is neither forward nor backward (optimizer step, copies, time between ops)
const PASSES = [['forward', 'Forward', 'Fwd'], ['backward', 'Backward', 'Bwd'], ['other', 'Other', 'Other']];
// phases the icicle can show; 'split' draws the passes side by side, 'both' their sum
const PHASES = [['split', 'forward | backward | other, side by side'],
  ['both', 'all passes, summed'], ...PASSES.map(([p]) => [p, p])];

// the sum of a per-pass field over the passes (fields absent from older documents count 0)
function allPasses(node, suffix) {
  return PASSES.reduce((sum, [p]) => sum + (node[`${p}_${suffix}`] || 0), 0);
}

class TraceprofView {
  // options: runSelectors (show the run and step selectors, default true), remember (keep the
  // chosen run in localStorage, default true), phase (the icicle's first phase, default 'both'),
  // title (a line beside the brand), footer (a line under the page)
  constructor(root, source, options = {}) {
    this.root = root;
    this.source = source;
    this.options = {runSelectors: true, remember: true, ...options};
    this.runs = [];
    this.run = null;   // run index (run.json + name)
    this.doc = null;   // profile document
    this.step = 'mean';
    this.metric = 'gpu_busy_us';
    this.opsKind = 'kernel';
    // what the person chose in the selectors; a choice the profile shown does not offer gives
    // way to that profile's default (a run without GPU has no GPU times, no kernels)
    this.chosen = {metric: null, opsKind: null};
    this.phase = this.options.phase || 'both';
    this.expanded = new Set();
    this.focus = null;  // icicle focus node id
    this.filter = '';
    this.selected = null;
    this.allColumns = false;
  }

  async start() {
    this.root.replaceChildren(el('div', {class: 'tp-message'}, 'Loading traceprof runs…'));
    try {
      this.runs = await this.source.runs();
    } catch (e) {
      this.showMessage(`Cannot list the runs: ${e.message}`);
      return;
    }
    if (!this.runs.length) {
      this.showMessage('No traceprof runs in this log directory. Write one with: ' +
          'traceprof tensorboard TRACE --logdir LOGDIR');
      return;
    }
    const remembered = this.remembered();
    const run = this.runs.find((r) => r.name === remembered) || this.runs[0];
    await this.selectRun(run.name);
  }

  remembered() {
    if (!this.options.remember) return null;
    try { return window.localStorage && localStorage.getItem('traceprof.run'); } catch (e) { return null; }
  }

  showMessage(text) {
    this.root.replaceChildren(el('div', {class: 'tp-message'}, text));
  }

  async selectRun(name) {
    this.run = this.runs.find((r) => r.name === name);
    if (this.options.remember) {
      try { localStorage.setItem('traceprof.run', name); } catch (e) { /* private mode */ }
    }
    this.step = 'mean';
    await this.load();
  }

  async load() {
    // the module selected and zoomed into, by path: ids are a document's own
    const pathOf = (id) => (id !== null && this.byId && this.byId.has(id) ? this.byId.get(id).path : null);
    const selectedPath = pathOf(this.selected);
    const focusPath = pathOf(this.focus);
    try {
      this.doc = await this.source.profile(this.run.name, this.step);
    } catch (e) {
      this.showMessage(`Cannot load the profile of run ${this.run.name}: ${e.message}`);
      return;
    }
    this.byId = new Map(this.doc.nodes.map((n) => [n.id, n]));
    this.pathIndex = null;
    this.hasGpu = (this.doc.stats.kernels + this.doc.stats.memcpys + this.doc.stats.memsets) > 0;
    this.applyChoices();
    this.extraFields = this.findExtraFields();
    this.expanded = new Set(this.doc.nodes
        .filter((n) => n.depth < 2 && n.kind === 'module' && n.children.length).map((n) => n.id));
    this.selected = this.nodeWithPath(selectedPath);
    this.focus = this.nodeWithPath(focusPath);
    this.render();
  }

  // the node with exactly this module path in the document shown, else null
  nodeWithPath(path) {
    if (!path) return null;
    const key = JSON.stringify(path);
    const node = this.doc.nodes.find((n) => JSON.stringify(n.path) === key);
    return node ? node.id : null;
  }

  // the time metrics this profile has (the first is its default)
  metrics() {
    return this.hasGpu ? Object.keys(METRICS) : ['cpu_us'];
  }

  // what the ops table can show (the first is the default): kernels only where there are
  // kernels and the metric is a GPU time, so that the table shows what the icicle shows
  opsKinds() {
    const anyKernels = (this.doc.ops || []).some((r) => r.kind === 'kernel');
    return anyKernels && this.metric !== 'cpu_us' ? ['kernel', 'op'] : ['op'];
  }

  // every selector: the person's choice where this profile offers it, else its default
  applyChoices() {
    const pick = (chosen, offered) => (offered.includes(chosen) ? chosen : offered[0]);
    this.metric = pick(this.chosen.metric, this.metrics());
    this.opsKind = pick(this.chosen.opsKind, this.opsKinds());
  }

  // Fields beyond the times, found on the nodes: additive per-pass ones ({phase}_total_X),
  // per-pass rates ({phase}_R) and any other numeric field. FLOPs get columns of their own when
  // a node has any; the rest show with "All columns".
  findExtraFields() {
    const phased = new Set();
    const rates = new Set();
    const plain = new Set();
    let anyFlops = false;
    let otherFlops = false;  // the optimizer's FLOPs: a column only when there are some
    for (const n of this.doc.nodes) {
      for (const [k, v] of Object.entries(n)) {
        let m;
        if ((m = /^(forward|backward|other)_total_(.+)$/.exec(k))) {
          if (!TIME_FIELDS.has(m[2])) phased.add(m[2]);
          if (m[2] === 'flops' && v) anyFlops = true;
          if (m[2] === 'flops' && v && m[1] === 'other') otherFlops = true;
        } else if (/^(forward|backward|other)_own_/.test(k)) {
          continue;
        } else if ((m = /^(forward|backward|other)_(.+)$/.exec(k))) {
          if (typeof v === 'number' || v === null) rates.add(m[2]);
        } else if (!KNOWN_NODE_FIELDS.has(k) && (typeof v === 'number' || v === null)) {
          plain.add(k);
        }
      }
    }
    const flops = this.doc.flops || {};
    const peak = flops.peak && flops.peak.flop_per_s ? flops.peak : null;
    return {phased: [...phased].sort(), rates: [...rates].sort(), plain: [...plain].sort(),
      flops: anyFlops, otherFlops, peak};
  }

  // Throughput time of a node: GPU busy time (CPU time on CPU-only traces), as traceprof defines it
  rateTime(n) {
    return this.value(n, this.hasGpu ? 'gpu_busy_us' : 'cpu_us', 'both');
  }

  throughput(n) {
    const flops = allPasses(n, 'total_flops');
    const us = this.rateTime(n);
    return flops && us ? flops / (us * 1e-6) : null;
  }

  value(node, metric = this.metric, phase = this.phase) {
    if (phase === 'both' || phase === 'split') return allPasses(node, `total_${metric}`);
    return node[`${phase}_total_${metric}`] || 0;
  }

  // -- layout --------------------------------------------------------------------------------

  render() {
    const toolbar = this.renderToolbar();
    const summary = this.renderSummary();
    this.icicleBox = el('div', {class: 'tp-icicle'});
    this.tableBox = el('div', {class: 'tp-table-wrap'});
    const timeName = METRICS[this.metric];
    this.root.replaceChildren(el('div', {class: 'tp-app'},
        toolbar, summary,
        this.renderPerStepPanel(),
        el('section', {class: 'tp-panel'},
            el('div', {class: 'tp-panel-head'},
                el('h2', {}, 'Module time'),
                el('span', {class: 'tp-hint'},
                    `${timeName} per step, width = time; click a module to zoom, the top bar to zoom out`)),
            this.icicleBox),
        this.renderOpsPanel(),
        this.renderTimelinePanel(),
        el('section', {class: 'tp-panel'},
            el('div', {class: 'tp-panel-head'},
                el('h2', {}, 'Module tree'),
                el('input', {class: 'tp-filter', id: 'tp-filter', type: 'search', placeholder: 'Filter modules…',
                  'aria-label': 'Filter modules by name or class',
                  value: this.filter, oninput: (e) => { this.filter = e.target.value; this.renderTable(); this.markFilter(); }}),
                this.extraFields.phased.length || this.extraFields.rates.length || this.extraFields.plain.length ?
                  el('label', {class: 'tp-check'}, el('input', {type: 'checkbox', id: 'tp-all-columns',
                    checked: this.allColumns, onchange: (e) => { this.allColumns = e.target.checked; this.renderTable(); }}),
                  'All columns') : null,
                el('button', {class: 'tp-button', onclick: () => this.expandAll(true)}, 'Expand all'),
                el('button', {class: 'tp-button', onclick: () => this.expandAll(false)}, 'Collapse all')),
            this.tableBox),
        this.options.footer ? el('footer', {class: 'tp-footer'}, this.options.footer) : null));
    this.renderIcicle();
    this.renderTable();
    this.renderOps();
    this.drawTimeline();
  }

  renderToolbar() {
    const {runSelectors, title} = this.options;
    const runSelect = el('select', {id: 'tp-run', onchange: (e) => this.selectRun(e.target.value)},
        this.runs.map((r) => el('option', {value: r.name, selected: r.name === this.run.name}, r.name)));
    const steps = this.run.steps || [];
    const meanOf = this.run.mean_of_steps || [];
    const meanLabel = meanOf.length > 1 ? `mean of ${meanOf.length} steps` :
        meanOf.length === 1 ? `ProfilerStep#${meanOf[0]}` : 'whole trace';
    const stepSelect = el('select', {id: 'tp-step', disabled: !steps.length,
      onchange: (e) => { this.step = e.target.value; this.load(); }},
    el('option', {value: 'mean', selected: this.step === 'mean'}, meanLabel),
    steps.map((s) => el('option', {value: String(s.step), selected: String(s.step) === this.step},
        `ProfilerStep#${s.step}`)));
    const metrics = this.metrics();
    const metricSelect = el('select', {id: 'tp-metric', disabled: metrics.length < 2,
      onchange: (e) => { this.chosen.metric = e.target.value; this.applyChoices(); this.render(); }},
    metrics.map((m) => el('option', {value: m, selected: m === this.metric}, METRICS[m])));
    const phaseSelect = el('select', {id: 'tp-phase',
      onchange: (e) => { this.phase = e.target.value; this.renderIcicle(); }},
    PHASES.map(([v, label]) => el('option', {value: v, selected: v === this.phase}, label)));
    return el('header', {class: 'tp-toolbar'},
        el('span', {class: 'tp-brand'}, 'traceprof'),
        title ? el('span', {class: 'tp-title', title: this.doc.trace.path || title}, title) : null,
        runSelectors ? el('label', {}, 'Run', runSelect) : null,
        runSelectors ? el('label', {}, 'Step', stepSelect) : null,
        el('label', {class: title ? 'tp-push' : null}, 'Time', metricSelect),
        el('label', {}, 'Icicle', phaseSelect));
  }

  // The run's scalars as numbers, one row per step (run.json per_step; none in the HTML report):
  // TensorBoard's charts draw a line of two points with no marker, so a run of a few steps looks
  // empty in its Scalars tab. Module columns have short names, the tag (qualified name) on hover;
  // a click on a step with a profile of its own shows that step.
  renderPerStepPanel() {
    const table = this.run.per_step;
    if (!table || !Array.isArray(table.steps) || !table.steps.length || !Array.isArray(table.series)) return null;
    const series = table.series.filter((s) => s && typeof s.tag === 'string' && Array.isArray(s.values));
    const modules = series.filter((s) => typeof s.module === 'string');
    // short names over the whole profile's tree (the run's document), by qualified name
    const nodes = (this.doc && this.doc.nodes) || [];
    const shortOf = treeShortNames(nodes);
    const byName = new Map(nodes.filter((n) => n.kind === 'module').reverse().map((n) => [n.qualified_name, shortOf.get(n.id)]));
    const shorts = new Map(modules.map((s) => [s.tag, byName.get(s.module) || s.module]));
    const moduleTime = modules.length ? METRICS[modules[0].tag.split('/')[0]] : null;
    const ownProfile = new Set((this.run.steps || []).map((s) => String(s.step)));
    const named = new Set(this.run.mean_of_steps || []);
    const head = el('tr', {}, el('th', {}, 'Step'), series.map((s) => el('th', {
      class: shorts.has(s.tag) ? 'tp-num tp-step-module' : 'tp-num', title: s.tag},
    shorts.has(s.tag) ? shorts.get(s.tag) : STEP_METRICS[s.tag.split('/')[0]] || s.tag)));
    const rows = table.steps.map((step, i) => {
      const own = ownProfile.has(String(step));
      return el('tr', {class: `tp-step-row${own ? ' tp-step-own' : ''}${String(step) === this.step ? ' tp-selected' : ''}`,
        'data-step': step, title: own ? `show ProfilerStep#${step}` : null,
        onclick: own ? () => { this.step = String(step); this.load(); } : null},
      el('td', {}, named.has(step) ? `ProfilerStep#${step}` : 'whole trace'),
      series.map((s) => el('td', {class: 'tp-num'}, perStepValue(s.unit, s.values[i]))));
    });
    return el('section', {class: 'tp-panel', id: 'tp-per-step'},
        el('div', {class: 'tp-panel-head'}, el('h2', {}, 'Per step'),
            el('span', {class: 'tp-hint'}, 'the values of the Scalars tab' +
              (moduleTime ? `; modules: ${moduleTime}, all passes` : '') +
              '; hover a column for its tag')),
        el('div', {class: 'tp-per-step-wrap'},
            el('table', {class: 'tp-per-step'}, el('thead', {}, head), el('tbody', {}, rows))));
  }

  renderSummary() {
    const d = this.doc;
    const s = d.steps;
    const devices = [...new Set((d.trace.devices || []).map((x) => x.name).filter(Boolean))];
    let device = devices.length ? devices.join(', ') : 'CPU only';
    if (d.trace.rank !== null && d.trace.world_size > 1) device += ` · rank ${d.trace.rank} of ${d.trace.world_size}`;
    let steps = s.numbers.length ?
        (s.count > 1 ? `mean of ${s.count} steps (${s.numbers.slice(0, 8).join(', ')}${s.numbers.length > 8 ? ', …' : ''})` :
          `ProfilerStep#${s.numbers[0]}`) : 'whole trace (no ProfilerStep)';
    const leftOut = (s.incomplete || []).filter((x) => !s.numbers.includes(x));
    if (leftOut.length) steps += `; incomplete left out: ${leftOut.join(', ')}`;
    // the profile's one count of module nodes (documents before it: counted here, the same way)
    const moduleCount = typeof d.hierarchy.module_nodes === 'number' ? d.hierarchy.module_nodes :
      d.nodes.filter((n) => n.kind === 'module').length;
    const cards = [
      ['Device', device],
      ['Modules', `${moduleCount} from ${d.hierarchy.description}`],
      ['Steps', steps],
      ['Wall / step', duration(s.wall_us)],
    ];
    if (this.hasGpu) {
      cards.push(['GPU busy / step', duration(s.gpu_busy_us)]);
      cards.push(['Kernels / step', count(s.kernels)]);
    }
    if (typeof s.cpu_between_ops_us === 'number') {
      // CPU time in ops (the union of each thread's top-level ops), the step's gaps apart
      cards.push(['CPU in ops / step', duration(s.cpu_us - s.cpu_between_ops_us)]);
      cards.push(['Between ops / step', duration(s.cpu_between_ops_us)]);
    } else {
      cards.push(['CPU / step', duration(s.cpu_us)]);
    }
    const mem = d.memory;
    if (mem && mem.peak) cards.push(['Memory peak', `${formatField('bytes', mem.peak.total_bytes)} (${mem.device})`]);
    if (mem && typeof mem.activation_bytes === 'number') cards.push(['Activations / step', formatField('bytes', mem.activation_bytes)]);
    if (this.extraFields.flops) {
      const achieved = (d.flops && d.flops.achieved) || {};
      const flops = s.flops !== undefined ? s.flops : this.stepFlops();
      cards.push(['FLOPs / step', bigNumber(flops, 'FLOP')]);
      const time = this.hasGpu ? s.gpu_busy_us : s.cpu_us;
      const rate = typeof achieved.flop_per_s === 'number' ? achieved.flop_per_s :
          (flops && time ? flops / (time * 1e-6) : null);
      if (rate) cards.push(['Achieved', bigNumber(rate, 'FLOP/s')]);
      if (typeof achieved.mfu === 'number') {
        const peak = this.extraFields.peak;
        cards.push(['MFU', peak ? `${percent(achieved.mfu)} of ${peak.device} ${peak.precision}` : percent(achieved.mfu)]);
      }
    }
    const warnings = (d.warnings || []).map((w) => el('div', {class: 'tp-warning'}, `⚠ ${w}`));
    return el('section', {class: 'tp-summary'},
        el('div', {class: 'tp-cards'}, cards.map(([k, v]) =>
          el('div', {class: 'tp-card'}, el('div', {class: 'tp-card-key'}, k), el('div', {class: 'tp-card-value', title: v}, v)))),
        warnings);
  }

  stepFlops() {
    return this.doc.roots.reduce((sum, id) => {
      const n = this.byId.get(id);
      return sum + allPasses(n, 'total_flops');
    }, 0);
  }

  // -- icicle --------------------------------------------------------------------------------

  renderIcicle() {
    const width = Math.max(320, (this.icicleBox.clientWidth || this.root.clientWidth || 1000) - 2);
    const focus = this.focus !== null ? this.byId.get(this.focus) : null;
    const top = focus ? [focus] : this.doc.roots.map((id) => this.byId.get(id));
    const crumbs = el('div', {class: 'tp-crumbs'});
    if (focus) {
      crumbs.append(el('button', {class: 'tp-link', onclick: () => { this.focus = null; this.renderIcicle(); }}, 'all modules'));
      for (const part of focus.path) crumbs.append(el('span', {class: 'tp-crumb-sep'}, '›'), el('span', {}, part || focus.class_name));
    } else {
      crumbs.append(el('span', {}, 'all modules'));
    }
    const timeName = METRICS[this.metric];
    const empty = (text) => el('div', {class: 'tp-empty'}, text);
    if (this.phase !== 'split') {
      const chart = this.icicleChart(top, this.phase, width);
      this.icicleBox.replaceChildren(crumbs, chart || empty(`No ${timeName} in this selection.`));
      this.markFilter();
      return;
    }
    // the passes side by side on one scale: each pass as wide as its time, a short one no
    // narrower than MIN_PASS_WIDTH so that it stays readable
    const passes = PASSES.map(([phase, label]) =>
      ({phase, label, total: top.reduce((a, n) => a + this.value(n, this.metric, phase), 0)}));
    const sum = passes.reduce((a, p) => a + p.total, 0);
    const shown = passes.filter((p) => p.total > 0);
    if (!shown.length) {
      this.icicleBox.replaceChildren(crumbs, empty(`No ${timeName} in this selection.`));
      return;
    }
    const avail = width - SPLIT_GAP * (shown.length - 1);
    const min = Math.min(MIN_PASS_WIDTH, avail / shown.length);
    const small = shown.map((p) => shown.length > 1 && avail * p.total / sum < min);
    const rest = shown.reduce((a, p, i) => (small[i] ? a : a + p.total), 0);
    const free = avail - min * small.filter(Boolean).length;
    const widths = shown.map((p, i) => (small[i] ? min : free * p.total / rest));
    const row = el('div', {class: 'tp-split'});
    shown.forEach((p, i) => {
      const w = Math.floor(widths[i]);
      row.append(el('div', {class: `tp-pass tp-pass-${p.phase}`, style: `width:${w}px`},
          el('div', {class: 'tp-pass-head'},
              el('span', {class: 'tp-pass-name'}, p.label),
              el('span', {class: 'tp-pass-time'}, `${duration(p.total)} · ${percent(p.total / sum)} of all passes`)),
          this.icicleChart(top, p.phase, w)));
    });
    // an empty forward or backward pass says so (inference has no backward); an empty other
    // pass (modules never have one) stays silent
    const missing = passes.filter((p) => p.total <= 0 && p.phase !== 'other').map((p) =>
      el('div', {class: `tp-empty tp-pass-missing tp-pass-${p.phase}`},
          `${p.label}: no ${timeName} in this selection.`));
    this.icicleBox.replaceChildren(crumbs, row, ...missing);
    this.markFilter();
  }

  // The icicle of the nodes `top` (side by side) in one phase, `width` px wide; null when empty.
  icicleChart(top, phase, width) {
    const value = (n) => this.value(n, this.metric, phase);
    const total = top.reduce((a, n) => a + value(n), 0);
    if (total <= 0) return null;
    const cells = [];
    let maxLevel = 0;
    const place = (node, x, level, scale) => {
      const w = value(node) * scale;
      if (w < 0.5 || level >= MAX_ICICLE_LEVELS) return;
      cells.push({node, x, w, level});
      maxLevel = Math.max(maxLevel, level);
      let cx = x;
      for (const id of node.children) {
        const child = this.byId.get(id);
        place(child, cx, level + 1, scale);
        cx += value(child) * scale;
      }
    };
    let x = 0;
    for (const n of top) { place(n, x, 0, width / total); x += value(n) * width / total; }
    const height = (maxLevel + 1) * ROW_HEIGHT;
    const chart = svg('svg', {class: 'tp-icicle-svg', width, height, viewBox: `0 0 ${width} ${height}`,
      'data-phase': phase});
    for (const c of cells) {
      // a node that is no module (compiled work, a group, time in no module) is styled apart
      const kind = c.node.kind === 'module' ? '' : ` tp-cell-nonmodule tp-cell-${c.node.kind}`;
      const g = svg('g', {class: `tp-cell${kind}`, 'data-id': c.node.id});
      const rect = svg('rect', {x: c.x + 0.5, y: c.level * ROW_HEIGHT + 0.5,
        width: Math.max(c.w - 1, 0.5), height: ROW_HEIGHT - 1, rx: 2, fill: colorOf(c.node)});
      if (this.selected === c.node.id) rect.setAttribute('class', 'tp-cell-selected');
      const tip = svg('title');
      tip.textContent = this.tooltip(c.node);
      g.append(rect, tip);
      const cls = classSuffix(c.node);
      const label = cls ? `${c.node.name}: ${cls}` : c.node.name;
      const chars = Math.floor((c.w - 8) / 6.6);
      if (chars >= 3) {
        const text = svg('text', {x: c.x + 4, y: c.level * ROW_HEIGHT + 15});
        text.textContent = label.length > chars ? label.slice(0, chars - 1) + '…' : label;
        g.append(text);
      }
      g.addEventListener('click', () => this.onCellClick(c.node, c.level, phase));
      chart.append(g);
    }
    return el('div', {class: 'tp-icicle-inner'}, chart);
  }

  // dims the icicle cells that the filter does not match
  markFilter() {
    const needle = this.filter.trim().toLowerCase();
    for (const g of this.icicleBox.querySelectorAll('.tp-cell')) {
      const node = this.byId.get(Number(g.getAttribute('data-id')));
      g.classList.toggle('tp-cell-dim', Boolean(needle) && !this.matches(node, needle));
    }
  }

  matches(node, needle) {
    return `${node.qualified_name} ${node.name} ${node.class_name}`.toLowerCase().includes(needle);
  }

  tooltip(node) {
    const name = node.qualified_name || node.name;
    const cls = node.class_name ? ` (${node.class_name})` : '';
    const t = (phase) => duration(node[`${phase}_total_${this.metric}`] || 0);
    const times = PASSES.map(([p]) => `${p} ${t(p)}`).join(', ');
    return `${name}${cls}\n${times}\n` +
        `${percent(node.share_of_step)} of the step${node.calls !== 1 ? `, ${count(node.calls)} calls` : ''}`;
  }

  // a click zooms the icicle to the module (its top bar: out to the parent) and the timeline to
  // the module's time span in the pass clicked
  onCellClick(node, level, phase = 'both') {
    const out = level === 0 && this.focus !== null;
    if (out) {
      this.focus = node.parent >= 0 && this.byId.has(node.parent) ? node.parent : null;
    } else if (node.children.length) {
      this.focus = node.id;
    }
    this.reveal(node.id);
    this.renderIcicle();
    this.zoomTimelineTo(out ? this.focus : node.id, phase);
  }

  // the timeline of the step shows the span of node `id` (the whole step for null)
  zoomTimelineTo(id, phase = 'both') {
    if (!this.timelineView) return;
    if (id === null) {
      this.timelineView.reset();
      return;
    }
    const span = this.timelineView.spanOf(id, phase);
    if (span) this.timelineView.setView(span[0], span[1]);
  }

  reveal(id) {
    this.selected = id;
    this.selectionChanged();
    for (let p = this.byId.get(id).parent; p >= 0 && this.byId.has(p); p = this.byId.get(p).parent) {
      this.expanded.add(p);
    }
    this.renderTable();
    const row = this.tableBox.querySelector(`tr[data-id="${id}"]`);
    if (row) row.scrollIntoView({block: 'nearest'});
  }

  // -- inside a module: its ops and kernels ---------------------------------------------------

  // the selected node, else the largest root (by the time shown): a rank or a report opens on
  // the model, not on a small first root such as zero_grad's annotation
  currentNode() {
    if (this.selected !== null && this.byId.has(this.selected)) return this.byId.get(this.selected);
    let largest = null;
    for (const id of this.doc.roots) {
      const n = this.byId.get(id);
      if (n && (largest === null || this.value(n, this.metric, 'both') > this.value(largest, this.metric, 'both'))) largest = n;
    }
    return largest;
  }

  selectionChanged() {
    this.renderOps();
    this.drawTimeline();
  }

  renderOpsPanel() {
    const labels = {kernel: 'Kernels', op: 'Ops'};
    this.opsTitle = el('h2', {});
    this.opsBox = el('div', {class: 'tp-ops-wrap'});
    const select = el('select', {id: 'tp-ops-kind',
      onchange: (e) => { this.chosen.opsKind = e.target.value; this.applyChoices(); this.renderOps(); }},
    this.opsKinds().map((k) => el('option', {value: k, selected: k === this.opsKind}, labels[k])));
    return el('section', {class: 'tp-panel', id: 'tp-ops'},
        el('div', {class: 'tp-panel-head'}, this.opsTitle,
            el('span', {class: 'tp-hint'}, 'with its submodules, per step; click a module in the chart or the tree'),
            el('label', {class: 'tp-check tp-push-right'}, 'Show', select)),
        this.opsBox);
  }

  // the ops (or kernels) of a node and its subtree, merged by name, shapes and pass
  opsOf(node, kind) {
    const ids = new Set();
    const stack = [node.id];
    while (stack.length) {
      const id = stack.pop();
      ids.add(id);
      const n = this.byId.get(id);
      if (n) stack.push(...n.children);
    }
    const merged = new Map();
    for (const r of this.doc.ops || []) {
      if (r.kind !== kind || !ids.has(r.node)) continue;
      const key = `${r.pass}\u0000${r.name}\u0000${r.input_shapes}`;
      const m = merged.get(key);
      if (!m) { merged.set(key, {...r}); continue; }
      for (const f of ['calls', 'kernels', 'gpu_busy_us', 'gpu_work_us', 'cpu_us', 'flops']) m[f] += r[f];
    }
    return [...merged.values()];
  }

  renderOps() {
    if (!this.opsBox) return;
    const node = this.currentNode();
    const kind = this.opsKind;
    this.opsTitle.textContent = `${kind === 'kernel' ? 'Kernels' : 'Ops'} of ${node.qualified_name || node.name}`;
    if (!this.doc.ops) {
      this.opsBox.replaceChildren(el('div', {class: 'tp-empty'},
          'This profile has no ops section (written by an older traceprof).'));
      return;
    }
    const timeField = this.metric;  // what the icicle and the tree show
    const whole = this.value(node, timeField, 'both');
    const rows = this.opsOf(node, kind).sort((a, b) => (b[timeField] - a[timeField]) || (b.cpu_us - a.cpu_us));
    if (!rows.length) {
      this.opsBox.replaceChildren(el('div', {class: 'tp-empty'}, `No ${kind === 'kernel' ? 'kernels' : 'ops'} in this module.`));
      return;
    }
    const shown = rows.slice(0, OPS_SHOWN);
    const anyFlops = kind === 'op' && rows.some((r) => r.flops);
    const head = el('tr', {}, el('th', {}, kind === 'kernel' ? 'Kernel' : 'Op'), el('th', {}, 'Pass'),
        el('th', {class: 'tp-num'}, 'Calls'),
        el('th', {class: 'tp-num tp-ops-metric', 'data-metric': timeField}, this.hasGpu ? METRICS[timeField] : 'CPU time'),
        el('th', {class: 'tp-num'}, 'Share of module'),
        kind === 'op' && timeField !== 'cpu_us' ? el('th', {class: 'tp-num'}, 'CPU') : null,
        anyFlops ? el('th', {class: 'tp-num'}, 'FLOPs') : null,
        anyFlops ? el('th', {class: 'tp-num'}, 'Throughput') : null,
        kind === 'op' ? el('th', {}, 'Input shapes') : null);
    const body = el('tbody');
    for (const r of shown) {
      const time = r[timeField];
      const share = whole > 0 ? time / whole : 0;
      const rate = r.flops && r[this.hasGpu ? 'gpu_busy_us' : 'cpu_us'] > 0 ? r.flops / (r[this.hasGpu ? 'gpu_busy_us' : 'cpu_us'] * 1e-6) : null;
      body.append(el('tr', {class: 'tp-op-row', 'data-pass': r.pass},
          el('td', {class: 'tp-op-name', title: r.name}, r.name),
          el('td', {class: `tp-op-pass tp-pass-label-${r.pass}`}, r.pass),
          el('td', {class: 'tp-num'}, count(Math.round(r.calls * 10) / 10)),
          el('td', {class: 'tp-num' + (time ? '' : ' tp-zero')}, duration(time)),
          el('td', {class: 'tp-num tp-share'},
              el('div', {class: 'tp-bar'}, el('div', {class: 'tp-bar-fill', style: `width:${Math.min(100, share * 100).toFixed(1)}%`})),
              el('span', {}, percent(share))),
          kind === 'op' && timeField !== 'cpu_us' ? el('td', {class: 'tp-num'}, duration(r.cpu_us)) : null,
          anyFlops ? el('td', {class: 'tp-num'}, r.flops ? formatField('flops', r.flops) : '--') : null,
          anyFlops ? el('td', {class: 'tp-num'}, rate ? formatField('flop_per_s', rate) : '--') : null,
          kind === 'op' ? el('td', {class: 'tp-shapes', title: r.input_shapes || ''}, r.input_shapes || '--') : null));
    }
    const more = rows.length > shown.length ?
      el('div', {class: 'tp-hint'}, `${rows.length - shown.length} more rows (traceprof analyze --ops MODULE lists them all)`) : null;
    fill(this.opsBox, el('table', {class: 'tp-ops'}, el('thead', {}, head), body), more);
  }

  // -- timeline of a step and memory over it --------------------------------------------------

  renderTimelinePanel() {
    const tl = this.doc.timeline;
    this.timelineBox = el('div', {class: 'tp-timeline-wrap'});
    this.memoryBox = el('div', {class: 'tp-memory-wrap', id: 'tp-memory'});
    this.timelineInfo = el('div', {class: 'tp-timeline-info', id: 'tp-timeline-info'}, ' ');
    if (!tl) {
      // no `timeline` key: a document written before profiles carried one; null: the profile
      // has none (no event with a time in the step)
      this.timelineView = null;
      return el('section', {class: 'tp-panel', id: 'tp-timeline'},
          el('div', {class: 'tp-panel-head'}, el('h2', {}, 'Timeline')),
          el('div', {class: 'tp-empty'}, tl === undefined ?
            'No timeline in this profile (written by an older traceprof).' :
            'No timeline: no event with a time in this profile\'s step.'));
    }
    const stepName = tl.step === null ? 'the whole trace' : `ProfilerStep#${tl.step}`;
    const meanOf = (this.doc.steps.numbers || []).length;
    const note = meanOf > 1 ? ` (the first of the ${meanOf} steps the numbers are the mean of)` : '';
    const b = tl.bounds || {};
    const bounded = b.events_in_step > b.events_shown ?
      `${count(b.events_shown)} of ${count(b.events_in_step)} events drawn: runs of events under ${duration(b.merged_below_us)} merged` +
        (b.dropped ? `, ${count(b.dropped)} shortest left out` : '') : `${count(b.events_in_step || 0)} events`;
    this.timelineView = new StepTimelineView(this, tl);
    const zoom = (f) => this.timelineView.zoomBy(f);
    return el('section', {class: 'tp-panel', id: 'tp-timeline'},
        el('div', {class: 'tp-panel-head'},
            el('h2', {}, `Timeline of ${stepName}`),
            el('span', {class: 'tp-hint'}, `${note ? note.trim() + '; ' : ''}${bounded}. Wheel or buttons: zoom; drag: pan; click an event: select its module`),
            el('span', {class: 'tp-push-right'}),
            el('button', {class: 'tp-button', id: 'tp-zoom-in', onclick: () => zoom(0.5)}, 'Zoom in'),
            el('button', {class: 'tp-button', id: 'tp-zoom-out', onclick: () => zoom(2)}, 'Zoom out'),
            el('button', {class: 'tp-button', id: 'tp-zoom-reset', onclick: () => this.timelineView.reset()}, 'Reset')),
        this.timelineInfo, this.timelineBox,
        tl.memory ? el('div', {id: 'tp-memory-panel'}, el('div', {class: 'tp-panel-head tp-memory-head'}, el('h2', {}, `Memory allocated on ${tl.memory.device}`),
            el('span', {class: 'tp-hint'}, tl.memory.exact_total ? 'the allocator\'s total at each [memory] event; module scopes under the curve' :
              'bytes allocated since the step began (the trace lacks the allocator\'s totals); module scopes under the curve'),
            tl.memory.blocks ? el('span', {class: 'tp-push-right'}) : null,
            tl.memory.blocks ? this.memoryStackSelect() : null),
        this.memoryBox, this.renderMemoryHolders()) : null);
  }

  // the short name of the node at `path` (its closest ancestor in the tree), else the path's end
  shortNameOfPath(path) {
    if (!this.shortOf) this.shortOf = treeShortNames(this.doc.nodes);
    const id = this.nodeOfPath(path);
    const exact = id >= 0 && JSON.stringify(this.byId.get(id).path) === JSON.stringify(path);
    return (exact && this.shortOf.get(id)) || path[path.length - 1] || '(root)';
  }

  // how the memory curve is stacked: by category, by module at a depth, or the total alone
  memoryStackSelect() {
    const depths = Math.max(1, ...this.doc.timeline.modules.map((p) => p.length));
    const options = [['category', 'by category'],
      ...Array.from({length: Math.min(depths, 6)}, (_, d) => [`module:${d}`, `by module, depth ${d}`]),
      ['total', 'total only']];
    if (!this.memStack) this.memStack = 'category';
    const select = el('select', {id: 'tp-memory-stack', title: 'stack the curve by what holds the memory',
      onchange: (ev) => { this.memStack = ev.target.value; this.drawTimeline(); }},
    options.map(([v, label]) => el('option', {value: v, selected: v === this.memStack}, label)));
    return el('label', {class: 'tp-hint'}, 'Stack ', select);
  }

  // what holds the memory at the step's peak and at the end of the forward (doc.memory)
  renderMemoryHolders() {
    const m = this.doc.memory;
    if (!m || (!m.peak && m.activation_bytes === null && !m.note)) return null;
    const bytes = (v) => formatField('bytes', v);
    const moment = (what, x) => {
      if (!x) return null;
      const parts = [['activations', x.activations_bytes], ['gradients', x.gradients_bytes],
        ['optimizer state', x.optimizer_state_bytes], ['temporaries', x.temporaries_bytes]];
      if (x.parameters_in_total) parts.push(['parameters', x.parameters_bytes]);
      parts.push(['before the trace', x.before_trace_bytes]);
      const holders = (x.activations_by_module || []).slice(0, 5).map((h) =>
        el('span', {class: 'tp-mem-holder', title: h.qualified_name}, `${this.shortNameOfPath(h.path)} ${bytes(h.bytes)}`));
      const params = x.parameters_bytes !== null && !x.parameters_in_total ?
        el('span', {class: 'tp-hint'}, ` · parameters ${bytes(x.parameters_bytes)} (module table) not in this total`) : null;
      return el('tr', {class: 'tp-mem-moment'},
          el('th', {}, what), el('td', {class: 'tp-num'}, bytes(x.total_bytes)),
          ...parts.map(([k, v]) => el('td', {class: 'tp-num', title: k}, bytes(v))),
          el('td', {class: 'tp-mem-holders'}, holders, params));
    };
    const head = el('tr', {}, el('th', {}, ''), el('th', {}, 'total'),
        ...['activations', 'gradients', 'optimizer state', 'temporaries'].map((k) => el('th', {}, k)),
        ...(((m.peak || m.forward_end || {}).parameters_in_total) ? [el('th', {}, 'parameters')] : []),
        el('th', {}, 'before the trace'), el('th', {}, 'largest activations'));
    const where = m.peak ? ` (step ${m.peak.step}, ${duration(m.peak.time_us)}, ${m.peak.phase} pass)` : '';
    const activations = m.activation_bytes !== null ?
      `${bytes(m.activation_bytes)} per step kept by the forward for the backward` : '';
    return el('div', {class: 'tp-mem-holders-box', id: 'tp-memory-holders'},
        el('div', {class: 'tp-hint'}, [activations, m.peak ? `peak ${bytes(m.peak.total_bytes)}${where}` : '', m.note || '']
          .filter(Boolean).join(' · ')),
        m.peak || m.forward_end ? el('table', {class: 'tp-mem-table'}, el('thead', {}, head),
          el('tbody', {}, moment('at the peak', m.peak), moment('end of forward', m.forward_end))) : null);
  }

  drawTimeline() {
    if (this.timelineView) this.timelineView.draw();
  }

  // the node a timeline module path stands for: the node with that path, else its closest
  // ancestor still in the tree (--depth, --top)
  nodeOfPath(path) {
    if (!this.pathIndex) {
      this.pathIndex = new Map(this.doc.nodes.map((n) => [JSON.stringify(n.path), n.id]));
    }
    for (let k = path.length; k > 0; k--) {
      const id = this.pathIndex.get(JSON.stringify(path.slice(0, k)));
      if (id !== undefined) return id;
    }
    return -1;
  }

  inSelectedSubtree(id) {
    if (this.selected === null || id < 0) return false;
    for (let n = this.byId.get(id); n; n = n.parent >= 0 ? this.byId.get(n.parent) : null) {
      if (n.id === this.selected) return true;
    }
    return false;
  }

  // -- tree table ----------------------------------------------------------------------------

  columns() {
    const m = this.metric;
    const cols = PASSES.map(([phase, label]) =>
      ({key: phase, label, num: true, get: (n) => n[`${phase}_total_${m}`] || 0, fmt: duration}));
    cols.push({key: 'share', label: 'Share of step', share: true});
    if (this.hasGpu) {
      cols.push({key: 'kernels', label: 'Kernels', num: true,
        get: (n) => allPasses(n, 'total_kernels'), fmt: count});
    }
    if (m !== 'cpu_us') {
      cols.push({key: 'cpu', label: 'CPU', num: true,
        get: (n) => allPasses(n, 'total_cpu_us'), fmt: duration});
    }
    const x = this.extraFields;
    if (x.flops) {
      for (const [phase, , short] of PASSES.filter(([p]) => p !== 'other' || x.otherFlops)) {
        cols.push({key: `${phase}_flops`, label: `${short} FLOPs`, num: true,
          get: (n) => n[`${phase}_total_flops`], fmt: (v) => formatField('flops', v)});
      }
      cols.push({key: 'throughput', label: 'Throughput', num: true, get: (n) => this.throughput(n),
        fmt: (v) => formatField('flop_per_s', v)});
      if (x.peak) {
        cols.push({key: 'mfu', label: 'MFU', num: true,
          get: (n) => { const t = this.throughput(n); return t === null ? null : t / x.peak.flop_per_s; },
          fmt: (v) => formatField('mfu', v)});
      }
    }
    if (this.allColumns) {
      for (const f of x.phased.filter((f) => f !== 'flops' || !x.flops)) {
        for (const [phase, , short] of PASSES) {
          cols.push({key: `${short}_${f}`, label: `${short} ${title(f)}`, num: true,
            get: (n) => n[`${phase}_total_${f}`], fmt: (v) => formatField(f, v)});
        }
      }
      for (const f of x.rates) {
        for (const [phase, , short] of PASSES) {
          cols.push({key: `${short}_${f}`, label: `${short} ${title(f)}`, num: true,
            get: (n) => n[`${phase}_${f}`], fmt: (v) => formatField(f, v)});
        }
      }
      for (const f of x.plain) {
        cols.push({key: f, label: capitalized(title(f)), num: true, get: (n) => n[f],
          fmt: (v) => formatField(f, v)});
      }
    }
    if (this.doc.nodes.some((n) => typeof n.activation_bytes === 'number')) {
      cols.push({key: 'activations', label: 'Activations', num: true, get: (n) => n.activation_bytes,
        fmt: (v) => formatField('bytes', v),
        title: () => 'bytes its forward allocated that are still allocated when the backward begins, per step'});
    }
    cols.push({key: 'calls', label: 'Calls', num: true, get: (n) => n.calls, fmt: count});
    // parameters and shapes come from a module table (traceprof.capture): no column without one
    const known = (v) => v !== null && v !== undefined;
    if (this.doc.nodes.some((n) => known(n.params_total))) {
      // "(tied)": some of them are counted in a module outside it (params_tied), as the text
      // reports mark them
      cols.push({key: 'params', label: 'Params', num: true, get: (n) => n.params_total,
        fmt: (v, n) => (n && n.params_tied > 0 ? `${bigNumber(v)} (tied)` : bigNumber(v)),
        title: (n) => (n.params_tied > 0 ?
          `${count(n.params_tied)} of them tied to a module outside it, counted there` : null)});
    }
    if (this.doc.nodes.some((n) => known(n.input_shapes) || known(n.output_shapes))) {
      cols.push({key: 'shapes', label: 'Input → output shapes', shapes: true});
    }
    return cols;
  }

  visibleNodes() {
    const out = [];
    const needle = this.filter.trim().toLowerCase();
    if (needle) {
      const keep = new Set();
      for (const n of this.doc.nodes) {
        if (this.matches(n, needle)) {
          for (let id = n.id; id >= 0 && this.byId.has(id); id = this.byId.get(id).parent) keep.add(id);
        }
      }
      const walk = (id) => {
        if (!keep.has(id)) return;
        const n = this.byId.get(id);
        out.push(n);
        n.children.forEach(walk);
      };
      this.doc.roots.forEach(walk);
      return out;
    }
    const walk = (id) => {
      const n = this.byId.get(id);
      out.push(n);
      if (this.expanded.has(id)) n.children.forEach(walk);
    };
    this.doc.roots.forEach(walk);
    return out;
  }

  renderTable() {
    const cols = this.columns();
    const head = el('tr', {}, el('th', {class: 'tp-col-name'}, 'Module'),
        cols.map((c) => el('th', {class: c.num || c.share ? 'tp-num' : ''}, c.label)));
    const body = el('tbody');
    for (const n of this.visibleNodes()) {
      const open = this.expanded.has(n.id) || this.filter.trim();
      const toggle = n.children.length ?
          el('button', {class: 'tp-toggle', 'aria-label': open ? 'collapse' : 'expand',
            onclick: (e) => { e.stopPropagation(); this.toggle(n.id); }}, open ? '▾' : '▸') :
          el('span', {class: 'tp-toggle tp-leaf'});
      const label = el('span', {class: 'tp-name', title: n.qualified_name || n.name}, n.name || n.class_name);
      const cls = classSuffix(n) ? el('span', {class: 'tp-class'}, classSuffix(n)) : null;
      const nameCell = el('td', {class: 'tp-col-name'},
          el('div', {class: 'tp-name-wrap', style: `padding-left:${n.depth * 16}px`}, toggle, label, cls));
      const cells = cols.map((c) => {
        if (c.share) {
          const share = n.share_of_step || 0;
          return el('td', {class: 'tp-num tp-share'},
              el('div', {class: 'tp-bar'}, el('div', {class: 'tp-bar-fill', style: `width:${Math.min(100, share * 100).toFixed(1)}%`})),
              el('span', {}, percent(share)));
        }
        if (c.shapes) {
          const text = n.input_shapes === null && n.output_shapes === null ? '--' :
              `${shape(n.input_shapes)} → ${shape(n.output_shapes)}`;
          return el('td', {class: 'tp-shapes', title: text}, text);
        }
        const v = c.get(n);
        const title = c.title ? c.title(n) : null;
        return el('td', {class: 'tp-num' + (v ? '' : ' tp-zero'), ...(title ? {title} : {})}, c.fmt(v, n));
      });
      const row = el('tr', {class: `tp-row tp-kind-${n.kind}${this.selected === n.id ? ' tp-selected' : ''}`,
        'data-id': n.id, 'data-depth': n.depth,
        onclick: () => { this.selected = n.id; this.focus = n.children.length ? n.id : (n.parent >= 0 ? n.parent : null); this.renderIcicle(); this.markSelected(); this.selectionChanged(); this.zoomTimelineTo(n.id); }},
      nameCell, cells);
      body.append(row);
    }
    this.tableBox.replaceChildren(el('table', {class: 'tp-tree'}, el('thead', {}, head), body));
  }

  markSelected() {
    for (const row of this.tableBox.querySelectorAll('tr.tp-row')) {
      row.classList.toggle('tp-selected', Number(row.dataset.id) === this.selected);
    }
  }

  toggle(id) {
    if (this.expanded.has(id)) this.expanded.delete(id); else this.expanded.add(id);
    this.renderTable();
  }

  expandAll(open) {
    this.expanded = open ? new Set(this.doc.nodes.filter((n) => n.children.length).map((n) => n.id)) : new Set();
    this.renderTable();
  }
}

// ---- the timeline of a step (canvas) and the memory curve under it (SVG) ---------------------
// Data: the profile's `timeline` (traceprof/step_timeline.py): lanes, and one entry per event in
// columns (lane, row, start, dur, name, module, phase, count), times in us from the step's start.

const TL_ROW = 14;         // px per row of a lane
const TL_LANE_GAP = 6;     // px between lanes
const TL_LABEL = 190;      // px of lane names on the left
const TL_AXIS = 18;        // px of the time axis on top
const TL_MIN_SPAN_US = 0.05;
const MEM_HEIGHT = 110;    // px of the memory curve
const MEM_SCOPE_ROWS = 2;  // module levels drawn under the curve
const MEM_SCOPE_ROW = 9;
const TL_NONE = '#cfcfcf';

function niceStep(span) {
  const raw = span / 8;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

class StepTimelineView {
  constructor(view, tl) {
    this.view = view;
    this.tl = tl;
    const e = tl.events;
    this.n = e.start.length;
    this.end = e.start.map((s, i) => s + e.dur[i]);
    this.v0 = 0;
    this.v1 = tl.span_us;
    this.laneTop = [];
    let y = TL_AXIS;
    for (const lane of tl.lanes) {
      this.laneTop.push(y);
      y += lane.rows * TL_ROW + TL_LANE_GAP;
    }
    this.height = y;
    // events of each lane row, for hit tests
    this.byRow = new Map();
    for (let i = 0; i < this.n; i++) {
      const key = e.lane[i] * 1000 + e.row[i];
      if (!this.byRow.has(key)) this.byRow.set(key, []);
      this.byRow.get(key).push(i);
    }
    this.nodes = null;  // module index -> node id, resolved on first draw
  }

  nodeOfModule(m) {
    if (!this.nodes) this.nodes = this.tl.modules.map((p) => this.view.nodeOfPath(p));
    return m >= 0 ? this.nodes[m] : -1;
  }

  width() {
    return Math.max(400, (this.view.timelineBox.clientWidth || 1000) - 2);
  }

  x(t, w) { return TL_LABEL + (t - this.v0) / (this.v1 - this.v0) * (w - TL_LABEL); }

  timeAt(x, w) { return this.v0 + (x - TL_LABEL) / (w - TL_LABEL) * (this.v1 - this.v0); }

  reset() { this.v0 = 0; this.v1 = this.tl.span_us; this.draw(); }

  zoomBy(factor, center = (this.v0 + this.v1) / 2) {
    const span = Math.max(TL_MIN_SPAN_US, (this.v1 - this.v0) * factor);
    const f = (center - this.v0) / (this.v1 - this.v0);
    this.setView(center - f * span, center - f * span + span);
  }

  setView(a, b) {
    const span = Math.min(this.tl.span_us, Math.max(TL_MIN_SPAN_US, b - a));
    a = Math.min(Math.max(0, a), this.tl.span_us - span);
    this.v0 = a;
    this.v1 = a + span;
    this.draw();
  }

  ensureCanvas() {
    if (this.canvas && this.canvas.isConnected) return;
    this.canvas = el('canvas', {class: 'tp-timeline-canvas', id: 'tp-timeline-canvas'});
    this.view.timelineBox.replaceChildren(this.canvas);
    let drag = null;
    this.canvas.addEventListener('mousedown', (ev) => { drag = {x: ev.offsetX, v0: this.v0, v1: this.v1, moved: false}; });
    this.canvas.addEventListener('mousemove', (ev) => {
      if (drag) {
        const dx = ev.offsetX - drag.x;
        if (Math.abs(dx) > 3) drag.moved = true;
        if (drag.moved) {
          const dt = dx / (this.width() - TL_LABEL) * (drag.v1 - drag.v0);
          this.setView(drag.v0 - dt, drag.v1 - dt);
        }
        return;
      }
      const i = this.hit(ev.offsetX, ev.offsetY);
      this.canvas.style.cursor = i >= 0 ? 'pointer' : 'grab';
      if (i >= 0) this.showInfo(i, false);
    });
    window.addEventListener('mouseup', (ev) => {
      if (!drag) return;
      const click = !drag.moved && ev.target === this.canvas;
      drag = null;
      if (click) this.click(ev.offsetX, ev.offsetY);
    });
    this.canvas.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      this.zoomBy(ev.deltaY > 0 ? 1.25 : 0.8, this.timeAt(ev.offsetX, this.width()));
    }, {passive: false});
  }

  click(x, y) {
    const i = this.hit(x, y);
    if (i < 0) return;
    this.showInfo(i, true);
    const id = this.nodeOfModule(this.tl.events.module[i]);
    if (id >= 0) {
      this.view.reveal(id);
      this.view.renderIcicle();
    }
  }

  showInfo(i, selected) {
    const e = this.tl.events;
    const id = this.nodeOfModule(e.module[i]);
    const node = id >= 0 ? this.view.byId.get(id) : null;
    const lane = this.tl.lanes[e.lane[i]];
    const parts = [this.tl.names[e.name[i]], node ? (node.qualified_name || node.name) : 'no module',
      ['forward', 'backward', 'other'][e.phase[i]], lane.name,
      `at ${duration(e.start[i])}`, `for ${duration(e.dur[i])}`];
    if (e.count[i] > 1) parts.push(`${count(e.count[i])} events merged`);
    this.view.timelineInfo.textContent = (selected ? 'Selected: ' : '') + parts.join(' · ');
    this.view.timelineInfo.dataset.event = String(i);
    this.view.timelineInfo.dataset.module = node ? (node.qualified_name || node.name) : '';
  }

  hit(x, y) {
    const w = this.width();
    const lane = this.laneTop.findIndex((top, k) => y >= top && y < top + this.tl.lanes[k].rows * TL_ROW);
    if (lane < 0 || x < TL_LABEL) return -1;
    const row = Math.floor((y - this.laneTop[lane]) / TL_ROW);
    const t = this.timeAt(x, w);
    const tol = 2 / (w - TL_LABEL) * (this.v1 - this.v0);
    let best = -1;
    for (const i of this.byRow.get(lane * 1000 + row) || []) {
      if (this.tl.events.start[i] <= t + tol && this.end[i] >= t - tol &&
          (best < 0 || this.tl.events.dur[i] < this.tl.events.dur[best])) best = i;
    }
    return best;
  }

  // [first start, last end] of the events of `nodeId`'s subtree in `phase` (a pass name; all
  // passes when the module has no event in it, or for 'both' and 'split'), or null: the module's
  // time span in the step.
  spanOf(nodeId, phase = 'both') {
    const e = this.tl.events;
    const inside = this.tl.modules.map((_, m) => {
      for (let n = this.view.byId.get(this.nodeOfModule(m)); n; n = n.parent >= 0 ? this.view.byId.get(n.parent) : null) {
        if (n.id === nodeId) return true;
      }
      return false;
    });
    const wanted = PASSES.findIndex(([p]) => p === phase);
    const span = (anyPhase) => {
      let a = Infinity;
      let b = -Infinity;
      for (let i = 0; i < this.n; i++) {
        if (e.module[i] < 0 || !inside[e.module[i]] || (!anyPhase && e.phase[i] !== wanted)) continue;
        a = Math.min(a, e.start[i]);
        b = Math.max(b, this.end[i]);
      }
      return a <= b ? [a, b] : null;
    };
    return (wanted >= 0 && span(false)) || span(true);
  }

  // Zooms to the first event on a GPU lane (else any lane) of `nodeId`'s subtree and returns
  // its centre in canvas pixels, or null: what a test clicks.
  locateEventOf(nodeId, laneKind = 'gpu') {
    const e = this.tl.events;
    const inside = (i) => {
      for (let n = this.view.byId.get(this.nodeOfModule(e.module[i])); n; n = n.parent >= 0 ? this.view.byId.get(n.parent) : null) {
        if (n.id === nodeId) return true;
      }
      return false;
    };
    let found = -1;
    for (let i = 0; i < this.n && found < 0; i++) {
      if (this.tl.lanes[e.lane[i]].kind === laneKind && inside(i)) found = i;
    }
    if (found < 0) return null;
    const span = Math.max(e.dur[found] * 8, TL_MIN_SPAN_US);
    this.setView(e.start[found] + e.dur[found] / 2 - span / 2, e.start[found] + e.dur[found] / 2 + span / 2);
    const w = this.width();
    const mid = (Math.max(this.x(e.start[found], w), TL_LABEL) + Math.min(this.x(this.end[found], w), w)) / 2;
    return {x: mid, y: this.laneTop[e.lane[found]] + e.row[found] * TL_ROW + TL_ROW / 2, event: found};
  }

  draw() {
    this.ensureCanvas();
    const w = this.width();
    const h = this.height;
    const ratio = window.devicePixelRatio || 1;
    const c = this.canvas;
    c.width = Math.round(w * ratio);
    c.height = Math.round(h * ratio);
    c.style.width = `${w}px`;
    c.style.height = `${h}px`;
    const g = c.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, h);
    g.font = '10px system-ui, sans-serif';
    g.textBaseline = 'middle';
    // axis
    const step = niceStep(this.v1 - this.v0);
    g.fillStyle = '#757575';
    g.strokeStyle = '#eeeeee';
    for (let t = Math.ceil(this.v0 / step) * step; t <= this.v1; t += step) {
      const x = this.x(t, w);
      g.beginPath(); g.moveTo(x + 0.5, TL_AXIS - 4); g.lineTo(x + 0.5, h); g.stroke();
      g.fillText(duration(t), x + 2, 8);
    }
    // lanes
    const e = this.tl.events;
    const colors = this.tl.modules.map((_, m) => {
      const id = this.nodeOfModule(m);
      return id >= 0 ? colorOf(this.view.byId.get(id)) : TL_NONE;
    });
    const selected = this.tl.modules.map((_, m) => this.view.inSelectedSubtree(this.nodeOfModule(m)));
    this.tl.lanes.forEach((lane, k) => {
      const top = this.laneTop[k];
      g.fillStyle = k % 2 ? '#fafafa' : '#ffffff';
      g.fillRect(0, top - TL_LANE_GAP / 2, w, lane.rows * TL_ROW + TL_LANE_GAP);
      g.fillStyle = '#424242';
      g.fillText(lane.name.length > 30 ? lane.name.slice(0, 29) + '…' : lane.name, 4, top + TL_ROW / 2);
    });
    const scale = (w - TL_LABEL) / (this.v1 - this.v0);
    const marked = [];
    for (let i = 0; i < this.n; i++) {
      if (this.end[i] < this.v0 || e.start[i] > this.v1) continue;
      const x0 = Math.max(TL_LABEL, TL_LABEL + (e.start[i] - this.v0) * scale);
      const x1 = Math.min(w, TL_LABEL + (this.end[i] - this.v0) * scale);
      const y = this.laneTop[e.lane[i]] + e.row[i] * TL_ROW;
      const m = e.module[i];
      g.fillStyle = m >= 0 ? colors[m] : TL_NONE;
      const bw = Math.max(x1 - x0, 0.8);
      g.fillRect(x0, y + 1, bw, TL_ROW - 2);
      if (m >= 0 && selected[m]) marked.push([x0, y, bw]);
      if (bw > 40) {
        g.fillStyle = '#212121';
        const name = this.tl.names[e.name[i]];
        const chars = Math.floor((bw - 4) / 5.5);
        g.save();
        g.beginPath(); g.rect(x0, y, bw, TL_ROW); g.clip();
        g.fillText(name.length > chars ? name.slice(0, Math.max(chars - 1, 1)) + '…' : name, x0 + 2, y + TL_ROW / 2);
        g.restore();
      }
    }
    g.strokeStyle = '#e65100';
    g.lineWidth = 1.5;
    for (const [x0, y, bw] of marked) g.strokeRect(x0 + 0.5, y + 1.5, Math.max(bw - 1, 0.5), TL_ROW - 3);
    g.fillStyle = '#e0e0e0';
    g.fillRect(TL_LABEL - 1, TL_AXIS - 4, 1, h);
    this.drawMemory(w);
  }

  drawMemory(w) {
    const mem = this.tl.memory;
    const box = this.view.memoryBox;
    if (!mem || !box) return;
    const t = mem.time_us;
    const b = mem.allocated_bytes;
    // the scale spans the step's lowest to highest total, so that changes on a large base show
    const hiB = Math.max(...b, 1);
    const loB = Math.min(...b);
    const pad = (hiB - loB) * 0.08 || hiB * 0.05;
    const base = Math.max(0, loB - pad);
    const max = hiB + pad;
    const height = MEM_HEIGHT + MEM_SCOPE_ROWS * MEM_SCOPE_ROW + 6;
    const chart = svg('svg', {class: 'tp-memory-svg', width: w, height, viewBox: `0 0 ${w} ${height}`});
    const y = (v) => MEM_HEIGHT - (v - base) / (max - base) * (MEM_HEIGHT - 4);
    // the curve: the total holds from one event to the next
    let lo = 0;
    while (lo < t.length - 1 && t[lo + 1] < this.v0) lo++;
    let hi = t.length - 1;
    while (hi > 0 && t[hi - 1] > this.v1) hi--;
    let d = '';
    for (let i = lo; i <= hi; i++) {
      const x = Math.min(Math.max(this.x(t[i], w), TL_LABEL), w);
      const next = i < hi ? Math.min(Math.max(this.x(t[i + 1], w), TL_LABEL), w) : w;
      d += `${d ? 'L' : 'M'}${x.toFixed(1)},${y(b[i]).toFixed(1)}L${next.toFixed(1)},${y(b[i]).toFixed(1)}`;
    }
    const layers = this.memoryLayers();
    if (d && layers) {
      // stacked from the bottom: each layer's band between the sum below it and the sum with it
      const below = new Float64Array(t.length).fill(base);
      const legend = [];
      for (const layer of layers) {
        let top = '';
        let bottom = '';
        for (let i = lo; i <= hi; i++) {
          const x = Math.min(Math.max(this.x(t[i], w), TL_LABEL), w);
          const next = i < hi ? Math.min(Math.max(this.x(t[i + 1], w), TL_LABEL), w) : w;
          const v = Math.max(below[i], base) + layer.values[i];
          top += `${top ? 'L' : 'M'}${x.toFixed(1)},${y(Math.min(v, max)).toFixed(1)}L${next.toFixed(1)},${y(Math.min(v, max)).toFixed(1)}`;
          bottom = `L${next.toFixed(1)},${y(Math.max(below[i], base)).toFixed(1)}L${x.toFixed(1)},${y(Math.max(below[i], base)).toFixed(1)}` + bottom;
        }
        for (let i = 0; i < t.length; i++) below[i] += layer.values[i];
        const band = svg('path', {class: 'tp-memory-layer', d: `${top}${bottom}Z`, fill: layer.color});
        const tip = svg('title');
        tip.textContent = layer.title || layer.name;
        band.append(tip);
        chart.append(band);
        legend.push(el('span', {class: 'tp-mem-key', title: layer.title || layer.name},
            el('span', {class: 'tp-mem-swatch', style: `background:${layer.color}`}), layer.name));
      }
      chart.append(svg('path', {class: 'tp-memory-line', d}));
      this.memoryLegend = el('div', {class: 'tp-mem-legend', id: 'tp-memory-legend'}, legend);
    } else if (d) {
      const firstX = Math.min(Math.max(this.x(t[lo], w), TL_LABEL), w);
      chart.append(svg('path', {class: 'tp-memory-area', d: `${d}L${w},${MEM_HEIGHT}L${firstX.toFixed(1)},${MEM_HEIGHT}Z`}));
      chart.append(svg('path', {class: 'tp-memory-line', d}));
      this.memoryLegend = null;
    }
    const scaleText = svg('text', {x: 4, y: 12, class: 'tp-memory-scale'});
    scaleText.textContent = `${formatField('bytes', hiB)}`;
    const zeroText = svg('text', {x: 4, y: MEM_HEIGHT - 2, class: 'tp-memory-scale'});
    zeroText.textContent = formatField('bytes', base);
    chart.append(scaleText, zeroText, svg('line', {x1: TL_LABEL, x2: w, y1: MEM_HEIGHT + 0.5, y2: MEM_HEIGHT + 0.5, class: 'tp-memory-axis'}));
    // module scopes under the curve: the first levels of the module lanes
    const e = this.tl.events;
    const scale = (w - TL_LABEL) / (this.v1 - this.v0);
    for (let i = 0; i < this.n; i++) {
      const kind = this.tl.lanes[e.lane[i]].kind;
      if ((kind !== 'modules_forward' && kind !== 'modules_backward') || e.row[i] >= MEM_SCOPE_ROWS) continue;
      if (this.end[i] < this.v0 || e.start[i] > this.v1) continue;
      const x0 = Math.max(TL_LABEL, TL_LABEL + (e.start[i] - this.v0) * scale);
      const x1 = Math.min(w, TL_LABEL + (this.end[i] - this.v0) * scale);
      const id = this.nodeOfModule(e.module[i]);
      const rect = svg('rect', {x: x0.toFixed(1), y: MEM_HEIGHT + 3 + e.row[i] * MEM_SCOPE_ROW,
        width: Math.max(x1 - x0, 0.8).toFixed(1), height: MEM_SCOPE_ROW - 1,
        fill: id >= 0 ? colorOf(this.view.byId.get(id)) : TL_NONE});
      const tip = svg('title');
      const node = id >= 0 ? this.view.byId.get(id) : null;
      tip.textContent = node ? (node.qualified_name || node.name) : this.tl.names[e.name[i]];
      rect.append(tip);
      chart.append(rect);
    }
    const scopesLabel = svg('text', {x: 4, y: MEM_HEIGHT + 10, class: 'tp-memory-scale'});
    scopesLabel.textContent = 'modules';
    chart.append(scopesLabel);
    // the peak, with the module whose event reached it
    const peak = mem.peak;
    const id = this.nodeOfModule(peak.module);
    const node = id >= 0 ? this.view.byId.get(id) : null;
    const label = `peak ${formatField('bytes', peak.bytes)} · ${node ? (node.qualified_name || node.name) : 'no module'} (${peak.phase}) at ${duration(peak.time_us)}`;
    if (peak.time_us >= this.v0 && peak.time_us <= this.v1) {
      const px = this.x(peak.time_us, w);
      const py = y(peak.bytes);
      chart.append(svg('circle', {cx: px.toFixed(1), cy: py.toFixed(1), r: 4, class: 'tp-memory-peak-dot'}));
      const text = svg('text', {x: Math.min(px + 7, w - 8), y: Math.max(py + 4, 12), class: 'tp-mem-peak',
        'text-anchor': px > w - 320 ? 'end' : 'start'});
      if (px > w - 320) text.setAttribute('x', (px - 7).toFixed(1));
      text.textContent = label;
      chart.append(text);
    }
    box.replaceChildren(el('div', {class: 'tp-memory-peak', id: 'tp-memory-peak'}, label), chart, this.memoryLegend || '');
  }

  // The curve's layers, bottom first, for the stacking chosen: each {name, color, values} with
  // a value per curve point (the bytes of the blocks alive just after that point's event, by
  // their category or by their module at a depth); the bottom layer is what the blocks do not
  // hold (allocated before the trace: parameters, earlier steps' state; blocks left out). Null:
  // the total alone.
  memoryLayers() {
    const mem = this.tl.memory;
    const blk = mem.blocks;
    const mode = this.view.memStack || 'category';
    if (!blk || mode === 'total' || !mem.exact_total) return null;
    const t = mem.time_us;
    const n = t.length;
    const keys = [];
    const index = new Map();
    const groupOf = new Int32Array(blk.start.length);
    const depth = mode.startsWith('module:') ? Number(mode.slice(7)) : -1;
    for (let i = 0; i < blk.start.length; i++) {
      let key;
      if (depth < 0) key = `c${blk.category[i]}`;
      else if (blk.module[i] < 0) key = 'none';
      else key = JSON.stringify(this.tl.modules[blk.module[i]].slice(0, depth + 1));
      if (!index.has(key)) { index.set(key, keys.length); keys.push(key); }
      groupOf[i] = index.get(key);
    }
    // sweep the blocks' starts and ends along the curve's points
    const values = keys.map(() => new Float64Array(n));
    const edges = [];
    for (let i = 0; i < blk.start.length; i++) {
      edges.push([blk.start[i], blk.bytes[i], groupOf[i]], [blk.end[i], -blk.bytes[i], groupOf[i]]);
    }
    edges.sort((a, b) => a[0] - b[0]);
    const now = new Float64Array(keys.length);
    for (let k = 0, j = 0; k < n; k++) {
      while (j < edges.length && edges[j][0] <= t[k]) { now[edges[j][2]] += edges[j][1]; j++; }
      for (let g = 0; g < keys.length; g++) values[g][k] = Math.max(now[g], 0);
    }
    const first = keys.map(() => Infinity);
    for (let i = 0; i < blk.start.length; i++) first[groupOf[i]] = Math.min(first[groupOf[i]], blk.start[i]);
    let groups = keys.map((key, g) => ({key, values: values[g], first: first[g], peak: values[g].reduce((a, b) => Math.max(a, b), 0)}));
    if (depth < 0) groups.sort((a, b) => a.key.localeCompare(b.key));  // categories in their order
    else groups.sort((a, b) => a.first - b.first);  // modules as they first allocate
    if (depth >= 0 && groups.length > 10) {  // the 9 largest modules, the rest summed
      const largest = new Set([...groups].sort((a, b) => b.peak - a.peak).slice(0, 9));
      const rest = groups.filter((g) => !largest.has(g));
      const summed = new Float64Array(n);
      for (const r of rest) for (let k = 0; k < n; k++) summed[k] += r.values[k];
      groups = [...groups.filter((g) => largest.has(g)), {key: 'more', values: summed, count: rest.length}];
    }
    const base = new Float64Array(n);
    for (let k = 0; k < n; k++) {
      base[k] = Math.max(mem.allocated_bytes[k] - groups.reduce((sum, g) => sum + g.values[k], 0), 0);
    }
    const baseName = blk.dropped ? `before the trace, and ${count(blk.dropped)} smallest blocks not drawn` : 'before the trace';
    const layers = [{name: baseName, color: '#e0e0e0', values: base,
      title: 'allocated before the trace and alive: parameters, earlier steps\' state, inputs'}];
    const CATEGORY_COLORS = ['#64b5f6', '#81c784', '#ffb74d', '#ba68c8'];
    groups.forEach((g, i) => {
      if (g.key.startsWith('c')) {
        const c = Number(g.key.slice(1));
        layers.push({name: blk.categories[c], color: CATEGORY_COLORS[c % CATEGORY_COLORS.length], values: g.values});
      } else if (g.key === 'none' || g.key === 'more') {
        layers.push({name: g.key === 'none' ? 'no module' : `${g.count} more modules`, color: '#bdbdbd', values: g.values});
      } else {
        const path = JSON.parse(g.key);
        const id = this.view.nodeOfPath(path);
        const node = id >= 0 ? this.view.byId.get(id) : null;
        const name = this.view.shortNameOfPath(path);
        layers.push({name: name || '(root)', title: node ? node.qualified_name || node.name : path.join(' › '),
          color: PALETTE[i % PALETTE.length], values: g.values});
      }
    });
    return layers;
  }
}

// Shows the runs of `source` in a new element appended to the page's body; resolves once the
// first profile is on screen.
export async function mount(source, options = {}) {
  document.body.classList.add('tp-body');
  const root = el('div', {id: 'traceprof'});
  document.body.append(root);
  const view = new TraceprofView(root, source, options);
  window.traceprofView = view;  // for debugging from the console
  let lastWidth = 0;
  window.addEventListener('resize', () => {
    if (view.doc && Math.abs(window.innerWidth - lastWidth) > 8) {
      lastWidth = window.innerWidth;
      view.renderIcicle();
    }
  });
  await view.start();
  return view;
}

// TensorBoard's entry point (the plugin's frontend_metadata): the runs of the log directory.
export async function render() {
  document.head.append(el('link', {rel: 'stylesheet', href: 'style.css'}));
  const view = await mount(tensorboardSource());
  // a run that is a rank of a job: the job's heat map above its tree (job.js, docs/jobs.md)
  const job = await import('./job.js');
  await job.mountTensorBoardJob(view, {el, duration, percent, signed, fetchJson, treeShortNames});
}

// The HTML report's entry point: one profile, given inline (style.css inlined by the page); the
// icicle shows the passes side by side.
export function renderReport(doc, {title = null, footer = null} = {}) {
  return mount(inlineSource(doc, title || 'profile'),
      {runSelectors: false, remember: false, phase: 'split', title, footer});
}
