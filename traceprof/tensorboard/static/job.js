// traceprof job view: a rank x module heat map of a distributed job (traceprof's job JSON
// document, docs/jobs.md). It uses index.js's helpers (el, duration, percent and, in the HTML
// report, renderReport), handed over by useJobHelpers: the HTML report inlines index.js and this
// file in one module script; the TensorBoard tab imports this file from index.js. Click a cell
// (or a rank's header) to open that rank's module tree: below the map in the report, the rank's
// run in TensorBoard.

const JOB_MAX_ROWS = 400;
let H = null;  // the helpers of index.js

export function useJobHelpers(helpers) {
  H = helpers;
}

function heatColor(fraction) {
  // white (0) to deep orange (1), as the tree's share bars
  const f = Math.max(0, Math.min(1, fraction || 0));
  const mix = (a, b) => Math.round(a + (b - a) * f);
  return `rgb(${mix(255, 230)}, ${mix(255, 81)}, ${mix(255, 0)})`;
}

function jobSummary(doc) {
  const box = H.el('div', {class: 'tp-job-summary'});
  const ranks = doc.ranks.length;
  box.append(H.el('div', {}, `${ranks} rank${ranks === 1 ? '' : 's'}` +
      (doc.world_size !== null ? ` of world size ${doc.world_size}` : '') +
      (doc.steps.length ? ` · steps ${doc.steps.join(', ')}` : '')));
  if (doc.missing_ranks.length) {
    box.append(H.el('div', {class: 'tp-job-warning'}, `missing ranks: ${doc.missing_ranks.join(', ')}`));
  }
  if (doc.stragglers.length) {
    for (const s of doc.stragglers) {
      const signed = (us) => `${us < 0 ? '-' : '+'}${H.duration(Math.abs(us))}`;
      const mods = s.modules.map((m) => `${m.qualified_name || m.module} ${signed(m.excess_us)}`);
      if (mods.length) {
        mods.push(`other modules ${signed(s.other_modules_us)}`,
            `outside the modules' own time ${signed(s.unexplained_us)}`);
      }
      box.append(H.el('div', {class: 'tp-job-straggler'},
          `straggler: rank ${s.rank}, +${H.duration(s.excess_us)} (+${H.percent(s.excess_fraction)}) ` +
          `over the median${mods.length ? '; modules: ' + mods.join(', ') : ''}`));
    }
  } else {
    box.append(H.el('div', {}, 'no straggler'));
  }
  for (const w of doc.warnings) box.append(H.el('div', {class: 'tp-job-warning'}, `warning: ${w}`));
  return box;
}

// The heat map of `doc` in a new element; open(rank, module) is called on a click.
function jobView(doc, title, open) {
  const root = H.el('div', {id: 'traceprof-job'});
  root.append(H.el('h2', {class: 'tp-job-title'}, title || 'traceprof job'));
  root.append(jobSummary(doc));
  const ranks = doc.ranks.map((r) => r.rank);
  const modules = doc.modules.slice(0, JOB_MAX_ROWS);
  const metric = doc.metric === 'gpu_busy_us' ? 'GPU busy time' : 'CPU time';
  root.append(H.el('div', {class: 'tp-job-note'},
      `${metric} per step of each module on each rank (all passes); a cell's color is its share ` +
      'of the row\'s largest. Click a cell or a rank to open that rank\'s module tree.'));
  const head = H.el('tr', {}, H.el('th', {class: 'tp-heat-module'}, 'module'),
      ...ranks.map((r) => H.el('th', {class: 'tp-heat-rank', 'data-rank': r,
        title: `open rank ${r}'s tree`, onclick: () => open(r, null)}, `r${r}`)));
  const body = H.el('tbody');
  for (const m of modules) {
    const times = m.times;
    const max = Math.max(0, ...Object.values(times));
    const row = H.el('tr', {class: `tp-heat-row tp-kind-${m.kind}`},
        H.el('td', {class: 'tp-heat-module', title: m.qualified_name || m.module,
          style: `padding-left: ${6 + 12 * m.depth}px`}, m.name || m.module));
    for (const r of ranks) {
      const v = times[String(r)];
      const label = v === undefined ? '--' : H.duration(v);
      const name = m.qualified_name || m.module;
      row.append(H.el('td', {class: 'tp-heat-cell', 'data-rank': r, 'data-module': m.module,
        style: v === undefined ? null : `background: ${heatColor(max > 0 ? v / max : 0)}`,
        title: `rank ${r} · ${name}: ${label}`, onclick: () => open(r, name)}, ''));
    }
    body.append(row);
  }
  root.append(H.el('div', {class: 'tp-heat-wrap'},
      H.el('table', {class: 'tp-heat', id: 'traceprof-heatmap'}, H.el('thead', {}, head), body)));
  if (doc.modules.length > modules.length) {
    root.append(H.el('div', {class: 'tp-job-note'},
        `the first ${modules.length} of ${doc.modules.length} modules are shown`));
  }
  const status = H.el('div', {class: 'tp-job-open', id: 'traceprof-job-open'}, '');
  root.append(status);
  const select = (rank, module, where) => {
    for (const c of root.querySelectorAll('.tp-heat-selected')) c.classList.remove('tp-heat-selected');
    if (rank === null) return;
    for (const c of root.querySelectorAll(`[data-rank="${rank}"]`)) c.classList.add('tp-heat-selected');
    status.textContent = `rank ${rank}` + (module ? ` · ${module}` : '') + `: ${where}`;
  };
  return {root, select};
}

// The HTML report's entry point: the heat map, and a rank's module tree below it on a click.
export function renderJob(doc, {title = null, footer = null} = {}) {
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
  });
  document.body.append(view.root);
  if (footer) view.root.append(H.el('div', {class: 'tp-footer'}, footer));
  return {root: view.root, get open() { return open; }};
}

// The TensorBoard tab: above the run's tree, the heat map of the job the run is a rank of
// (the plugin's job?run=NAME; nothing for a run of no job); a click selects that rank's run.
export function mountTensorBoardJob(view, helpers) {
  useJobHelpers(helpers);
  let shown = null;  // {root, select, doc}
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
      });
      shown = {...jv, key: JSON.stringify(doc.runs)};
      view.root.before(jv.root);
    }
    const rank = Object.keys(doc.runs).find((r) => doc.runs[r] === run);
    shown.select(rank === undefined ? null : Number(rank), null, `run ${run} below`);
  };
  const selectRun = view.selectRun.bind(view);
  view.selectRun = async (name) => {
    await selectRun(name);
    await refresh();
  };
  return refresh();
}
