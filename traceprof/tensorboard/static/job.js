// traceprof job view: a rank x module heat map of a distributed job (traceprof's job JSON
// document, docs/jobs.md). It uses index.js's helpers (el, duration, percent, signed,
// treeShortNames and, in the HTML report, renderReport), handed over by useJobHelpers: the HTML
// report inlines index.js and this file in one module script; the TensorBoard tab imports this
// file from index.js. Click a cell (or a rank's header) to open that rank's module tree: below
// the map in the report, the rank's run in TensorBoard.

const JOB_MAX_ROWS = 400;
let H = null;  // the helpers of index.js

export function useJobHelpers(helpers) {
  H = helpers;
}

// One colour scale for the whole matrix: time on a log scale from the smallest time above zero
// to the largest, light (short) to dark (long); a cell of no time is grey, a rank that lacks the
// module is empty.
const HEAT_STOPS = [[255, 245, 235], [253, 190, 133], [241, 105, 19], [166, 54, 3], [103, 0, 13]];
const HEAT_ZERO = '#eeeeee';
const CELL_TEXT_PX = 58;  // the narrowest cell that shows its number (narrower: on hover)
const LEGEND_TICKS = 5;

function heatScale(values) {
  let lo = Infinity;
  let hi = 0;
  for (const v of values) {
    if (v > 0 && v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (!(hi > 0)) return null;
  const span = Math.log(hi) - Math.log(lo);
  // the position of v on the scale, 0 (lo) to 1 (hi)
  const at = (v) => (span > 0 ? Math.min(1, Math.max(0, (Math.log(v) - Math.log(lo)) / span)) : 1);
  // the value at position f
  const value = (f) => Math.exp(Math.log(lo) + f * span);
  return {lo, hi, at, value};
}

function heatColor(f) {
  const x = Math.max(0, Math.min(1, f)) * (HEAT_STOPS.length - 1);
  const i = Math.min(Math.floor(x), HEAT_STOPS.length - 2);
  const t = x - i;
  const [a, b] = [HEAT_STOPS[i], HEAT_STOPS[i + 1]];
  return `rgb(${a.map((c, k) => Math.round(c + (b[k] - c) * t)).join(', ')})`;
}

function heatLegend(scale) {
  const box = H.el('div', {class: 'tp-heat-legend', id: 'traceprof-heat-legend'});
  if (!scale) return box;
  const stops = HEAT_STOPS.map((_, i) => heatColor(i / (HEAT_STOPS.length - 1)));
  const ticks = [];
  for (let i = 0; i < LEGEND_TICKS; i++) {
    const f = i / (LEGEND_TICKS - 1);
    ticks.push(H.el('span', {class: 'tp-heat-tick', style: `left: ${(f * 100).toFixed(1)}%`},
        H.duration(scale.value(f))));
  }
  box.append(
      H.el('span', {class: 'tp-heat-swatch', style: `background: ${HEAT_ZERO}`}), H.el('span', {}, '0'),
      H.el('span', {class: 'tp-heat-swatch tp-heat-absent'}), H.el('span', {}, 'not on the rank'),
      H.el('div', {class: 'tp-heat-scale'},
          H.el('div', {class: 'tp-heat-bar', style: `background: linear-gradient(to right, ${stops.join(', ')})`}),
          H.el('div', {class: 'tp-heat-ticks'}, ticks)),
      H.el('span', {class: 'tp-hint'}, 'log scale'));
  return box;
}

const signedTime = (us) => H.signed(us, H.duration);
const signedPct = (f) => H.signed(f, H.percent);
const CPU_STEP_COLUMNS = [['wall_us', 'Step wall'], ['cpu_compute_us', 'CPU compute']];
const GPU_STEP_COLUMNS = [['wall_us', 'Step wall'], ['gpu_busy_us', 'GPU busy'], ['compute_us', 'Compute'],
  ['collective_us', 'Collectives'], ['collective_exposed_us', 'Not overlapped'], ['idle_us', 'GPU idle']];
const STRAGGLER_METRICS = {
  compute_us: 'GPU compute time per step (GPU busy outside collectives)',
  cpu_compute_us: 'CPU compute time per step (CPU time in ops outside collectives)',
};

// the name of a job module to read: its short name (names, module id -> short), the qualified
// name in the title
function moduleName(m, names) {
  const full = m.qualified_name || m.module;
  return H.el('span', {class: 'tp-name', title: full}, names.get(m.module) || full);
}

function jobCards(doc) {
  const ranks = doc.ranks.length;
  const cards = [
    ['Ranks', `${ranks}` + (doc.world_size !== null ? ` of world size ${doc.world_size}` : '')],
    ['Steps', doc.steps.length ? `mean of ${doc.steps.length} (${doc.steps.join(', ')})` : 'the whole trace'],
    ['Time', doc.metric === 'gpu_busy_us' ? 'GPU busy time' : 'CPU time'],
    ['Stragglers', doc.stragglers.length ? doc.stragglers.map((s) => `rank ${s.rank}`).join(', ') : 'none'],
  ];
  if (doc.missing_ranks.length) cards.push(['Missing ranks', doc.missing_ranks.join(', ')]);
  return H.el('div', {class: 'tp-cards'}, cards.map(([k, v]) =>
    H.el('div', {class: 'tp-card'}, H.el('div', {class: 'tp-card-key'}, k),
        H.el('div', {class: 'tp-card-value', title: v}, v))));
}

// bytes as the page's other numbers (index.js bigNumber): 42.50 MB, '--' when unknown
function byteCount(value) {
  if (value === null || value === undefined) return '--';
  for (const [div, suffix] of [[1e15, ' PB'], [1e12, ' TB'], [1e9, ' GB'], [1e6, ' MB'], [1e3, ' kB']]) {
    if (Math.abs(value) >= div) return `${(value / div).toFixed(2)}${suffix}`;
  }
  return `${Math.round(value)} B`;
}

// The ranks' step times (the table of `traceprof analyze JOB`), a click on a rank opens it.
function stepTable(doc, open) {
  const columns = doc.step_metric === 'cpu_compute_us' ? CPU_STEP_COLUMNS : GPU_STEP_COLUMNS;
  const num = (text, cls = '') => H.el('td', {class: `tp-num ${cls}`}, text);
  // the memory peak per rank: only for jobs whose traces have [memory] events
  const memory = doc.ranks.some((r) => typeof r.memory_peak_bytes === 'number');
  const head = H.el('tr', {}, H.el('th', {}, 'Rank'),
      columns.map(([, label]) => H.el('th', {class: 'tp-num'}, label)),
      H.el('th', {class: 'tp-num'}, 'Kernels'), memory ? H.el('th', {class: 'tp-num'}, 'Memory peak') : null,
      H.el('th', {}, ''));
  const body = H.el('tbody');
  for (const r of doc.ranks) {
    body.append(H.el('tr', {class: `tp-job-rank${r.straggler ? ' tp-job-straggling' : ''}`, 'data-rank': r.rank,
      onclick: () => open(r.rank, null)},
    H.el('td', {}, `rank ${r.rank}`),
    columns.map(([k]) => num(H.duration(r.step[k] || 0))),
    num(String(r.step.kernels ?? r.kernels ?? '--')),
    memory ? num(byteCount(r.memory_peak_bytes)) : null,
    H.el('td', {class: 'tp-job-flag'}, r.straggler ? 'straggler' : '')));
  }
  if (doc.ranks.length > 1) {
    const spread = (k) => doc.step_spread[k];
    for (const [label, key] of [['median', 'median'], ['max', 'max']]) {
      body.append(H.el('tr', {class: 'tp-job-stat'}, H.el('td', {}, label),
          columns.map(([k]) => num(spread(k) ? H.duration(spread(k)[key]) : '--')), H.el('td'),
          memory ? H.el('td') : null, H.el('td')));
    }
    body.append(H.el('tr', {class: 'tp-job-stat'}, H.el('td', {}, 'slowest'),
        columns.map(([k]) => num(spread(k) ? `rank ${spread(k).slowest_rank}` : '--')), H.el('td'),
        memory ? H.el('td') : null, H.el('td')));
  }
  return H.el('div', {class: 'tp-ops-wrap'},
      H.el('table', {class: 'tp-ops tp-job-steps', id: 'traceprof-job-steps'}, H.el('thead', {}, head), body));
}

// What a straggler is compared with, as the terminal says it (render/job_text.py reference_text):
// the faster of two ranks, the median rank, or the two middle ones' mean
function referenceText(s) {
  const ranks = s.reference_ranks.map((r) => `rank ${r}`).join(' and ');
  return s.reference === 'median ranks' ? `the median ranks (${ranks}, their mean)` : `the ${s.reference} (${ranks})`;
}

// What makes up each straggler's excess (the terminal's straggler section), short names.
function stragglerList(doc, names) {
  const what = STRAGGLER_METRICS[doc.step_metric] || 'step wall time';
  const box = H.el('div', {class: 'tp-job-stragglers', id: 'traceprof-job-stragglers'},
      H.el('div', {class: 'tp-hint'}, `Ranks whose ${what} is above ` +
          `${doc.ranks.length === 2 ? 'the faster rank\'s' : 'the median'} by more than ` +
          `${H.percent(doc.straggler_threshold)}.`));
  if (doc.ranks.length < 2) box.append(H.el('div', {}, 'one rank: nothing to compare'));
  else if (!doc.stragglers.length) box.append(H.el('div', {}, 'no straggler'));
  for (const s of doc.stragglers) {
    const line = H.el('div', {class: 'tp-job-straggler'},
        `straggler: rank ${s.rank}, ${H.duration(s.step_us)}, ${signedTime(s.excess_us)} ` +
        `(${signedPct(s.excess_fraction)}) over ${referenceText(s)} ${H.duration(s.reference_us)}`);
    box.append(line);
    if (!s.modules.length) continue;
    const parts = s.modules.map((m) => H.el('li', {}, moduleName(m, names), ' ',
        H.el('span', {class: 'tp-num tp-worse'}, signedTime(m.excess_us))));
    parts.push(H.el('li', {}, 'the other modules ', H.el('span', {class: 'tp-num'}, signedTime(s.other_modules_us))));
    parts.push(H.el('li', {}, doc.metric === 'gpu_busy_us' ?
      'kernels running at once (summed per module, counted once in the step time) ' :
      'time outside the modules\' own time ', H.el('span', {class: 'tp-num'}, signedTime(s.unexplained_us))));
    box.append(H.el('div', {class: 'tp-hint'}, `against ${referenceText(s)}, all passes:`),
    H.el('ul', {class: 'tp-job-excess'}, parts));
  }
  for (const w of doc.warnings) box.append(H.el('div', {class: 'tp-warning'}, `⚠ ${w}`));
  return box;
}

// the rows of the heat map in the order `sort` asks: 'time' (the largest time on any rank
// first), 'spread' (the largest max - min first) or 'tree' (the module tree's order)
function sortedModules(modules, sort) {
  const rows = modules.map((m, order) => {
    const times = Object.values(m.times);
    const max = times.length ? Math.max(...times) : 0;
    const min = times.length ? Math.min(...times) : 0;
    return {m, order, max, spread: max - min};
  });
  if (sort === 'time') rows.sort((a, b) => (b.max - a.max) || (a.order - b.order));
  if (sort === 'spread') rows.sort((a, b) => (b.spread - a.spread) || (b.max - a.max) || (a.order - b.order));
  return rows.map((r) => r.m);
}

// The heat map of `doc` in a new panel; open(rank, module) is called on a click. shortNames:
// module id -> short name, as the HTML report embeds it (told apart among every rank's nodes,
// traceprof/render/job_html.py); without it (the TensorBoard tab, whose job is whole) they are
// computed over the job's modules.
function jobView(doc, title, open, embedded = false, shortNames = null) {
  const root = H.el('div', {id: 'traceprof-job', class: embedded ? 'tp-job-embedded' : 'tp-app'});
  const ranks = doc.ranks.map((r) => r.rank);
  const modules = doc.modules.slice(0, JOB_MAX_ROWS);
  const names = shortNames ? new Map(Object.entries(shortNames)) :  // by module id
    H.treeShortNames(doc.modules, (m) => m.module);
  const scale = heatScale(modules.flatMap((m) => Object.values(m.times)));
  const metric = doc.metric === 'gpu_busy_us' ? 'GPU busy time' : 'CPU time';
  let sort = 'time';
  const sortSelect = H.el('select', {id: 'tp-heat-sort', onchange: (e) => { sort = e.target.value; draw(); }},
      [['time', 'largest time first'], ['spread', 'largest spread first'], ['tree', 'module tree']].map(
          ([v, label]) => H.el('option', {value: v, selected: v === sort}, label)));
  const table = H.el('table', {class: 'tp-heat', id: 'traceprof-heatmap'});
  const wrap = H.el('div', {class: 'tp-heat-wrap'}, table);
  const fits = () => {  // numbers in the cells where a cell is wide enough, else on hover
    const cell = table.querySelector('td.tp-heat-cell');
    table.classList.toggle('tp-heat-compact', Boolean(cell) && cell.clientWidth < CELL_TEXT_PX);
  };
  const draw = () => {
    const head = H.el('tr', {}, H.el('th', {class: 'tp-heat-module'}, 'Module'),
        ...ranks.map((r) => H.el('th', {class: 'tp-heat-rank', 'data-rank': r,
          title: `open rank ${r}'s tree`, onclick: () => open(r, null)}, `r${r}`)));
    const body = H.el('tbody');
    for (const m of sortedModules(modules, sort)) {
      const full = m.qualified_name || m.name || m.module;
      const label = sort === 'tree' ? (m.name || full) : names.get(m.module);
      const zero = !Object.values(m.times).some((v) => v > 0);
      const row = H.el('tr', {class: `tp-heat-row tp-kind-${m.kind}${zero ? ' tp-heat-zero' : ''}`},
          H.el('td', {class: 'tp-heat-module', title: full,
            style: sort === 'tree' ? `padding-left: ${6 + 12 * m.depth}px` : null}, label));
      for (const r of ranks) {
        const v = m.times[String(r)];
        const text = v === undefined ? '--' : H.duration(v);
        const f = v > 0 ? scale.at(v) : null;
        row.append(H.el('td', {class: `tp-heat-cell${f !== null && f > 0.55 ? ' tp-heat-dark' : ''}`,
          'data-rank': r, 'data-module': m.module,
          style: v === undefined ? null : `background: ${f === null ? HEAT_ZERO : heatColor(f)}`,
          title: `rank ${r} · ${full}: ${text}`, onclick: () => open(r, label)},
        H.el('span', {class: 'tp-heat-value'}, v === undefined ? '' : text)));
      }
      body.append(row);
    }
    table.replaceChildren(H.el('thead', {}, head), body);
    fits();
  };
  window.addEventListener('resize', fits);
  const status = H.el('div', {class: 'tp-job-open', id: 'traceprof-job-open'}, '');
  const panel = (id, heading, hint, ...content) => H.el('section', {class: 'tp-panel', id},
      H.el('div', {class: 'tp-panel-head'}, H.el('h2', {}, heading), hint ? H.el('span', {class: 'tp-hint'}, hint) : null),
      ...content);
  root.append(
      embedded ? null : H.el('header', {class: 'tp-toolbar'}, H.el('span', {class: 'tp-brand'}, 'traceprof'),
          H.el('span', {class: 'tp-title'}, title || 'job')),
      H.el('section', {class: 'tp-summary'}, jobCards(doc)),
      panel('traceprof-job-map', embedded ? `Job: ${metric} per step, module x rank` : 'Modules x ranks',
          `${metric} per step of each module on each rank (all passes), one colour scale for the whole ` +
          'map; click a cell or a rank to open that rank\'s module tree',
          H.el('div', {class: 'tp-heat-controls'}, H.el('label', {class: 'tp-check'}, 'Rows', sortSelect),
              heatLegend(scale)),
          wrap,
          doc.modules.length > modules.length ?
            H.el('div', {class: 'tp-hint'}, `the first ${modules.length} of ${doc.modules.length} modules are shown`) : null,
          // a rank whose rows add up to more than its step says why (several threads at once)
          ...doc.ranks.filter((r) => r.over_wall).map((r) => H.el('div', {class: 'tp-hint tp-job-over-wall'},
            `rank ${r.rank}: its modules and (not in any module) add up to ${H.duration(r[doc.metric])} ` +
            `of ${metric} per step, above its step's wall time ${H.duration(r.wall_us)}: ${r.over_wall}`)),
          status),
      embedded ? null : panel('traceprof-job-ranks', 'Ranks, per step',
        doc.step_metric === 'cpu_compute_us' ? 'CPU time; CPU compute: time in ops outside collectives' :
          'GPU time; collectives: NCCL/RCCL kernels; not overlapped: collective time with no other GPU work running',
        stepTable(doc, open)),
      panel('traceprof-job-straggler-panel', 'Stragglers', null, stragglerList(doc, names)));
  draw();
  const select = (rank, module, where) => {
    for (const c of root.querySelectorAll('.tp-heat-selected')) c.classList.remove('tp-heat-selected');
    if (rank === null) return;
    for (const c of root.querySelectorAll(`.tp-heat [data-rank="${rank}"]`)) c.classList.add('tp-heat-selected');
    status.textContent = `rank ${rank}` + (module ? ` · ${module}` : '') + `: ${where}`;
  };
  return {root, select, fits};
}

// The HTML report's entry point: the heat map, and a rank's module tree below it on a click.
export function renderJob(doc, {title = null, footer = null, short_names: shortNames = null} = {}) {
  document.body.classList.add('tp-body');
  let open = null;
  const view = jobView(doc, title, (rank, module) => {
    const profile = doc.profiles && doc.profiles[String(rank)];
    if (!profile) return;
    const old = document.getElementById('traceprof');
    if (old) old.remove();
    open = rank;
    view.select(rank, module, 'module tree below');
    H.renderReport(profile, {title: `rank ${rank}`, footer: doc.ranks.find((r) => r.rank === rank).path});
  }, false, shortNames);
  document.body.append(view.root);
  view.fits();
  if (footer) view.root.append(H.el('div', {class: 'tp-footer'}, footer));
  return {root: view.root, get open() { return open; }};
}

// The TensorBoard tab: under the run's toolbar (its run and step selectors stay at the top), the
// heat map of the job the run is a rank of (the plugin's job?run=NAME; nothing for a run of no
// job); a click selects that rank's run.
export function mountTensorBoardJob(view, helpers) {
  useJobHelpers(helpers);
  let shown = null;  // {root, select, fits, key}
  // the heat map's place: after the toolbar of the view's page, which each render rebuilds
  const place = () => {
    if (!shown) return;
    const toolbar = view.root.querySelector('.tp-toolbar');
    if (toolbar) toolbar.after(shown.root); else view.root.prepend(shown.root);
    shown.fits();
  };
  const refresh = async () => {
    const run = view.run && view.run.name;
    if (!run) return;
    let doc = null;
    try {
      doc = await H.fetchJson(`job?run=${encodeURIComponent(run)}`);
    } catch (e) {
      doc = null;  // a run of no job
    }
    if (shown && (!doc || !doc.runs || shown.key !== JSON.stringify(doc.runs))) {
      shown.root.remove();
      shown = null;
    }
    if (!doc || !doc.runs) return;
    if (!shown) {
      const jv = jobView(doc, 'traceprof job', (rank) => {
        const target = doc.runs[String(rank)];
        if (target && target !== (view.run && view.run.name)) view.selectRun(target);
      }, true);
      shown = {...jv, key: JSON.stringify(doc.runs)};
    }
    place();
    const rank = Object.keys(doc.runs).find((r) => doc.runs[r] === run);
    shown.select(rank === undefined ? null : Number(rank), null, `run ${run} below`);
  };
  const render = view.render.bind(view);
  view.render = () => {
    render();
    place();
  };
  const selectRun = view.selectRun.bind(view);
  view.selectRun = async (name) => {
    await selectRun(name);
    await refresh();
  };
  return refresh();
}
