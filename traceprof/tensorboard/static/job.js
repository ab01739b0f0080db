// traceprof job view: a rank x module heat map of a distributed job (traceprof's job JSON
// document, docs/jobs.md). Loaded after index.js in the same module script, it uses its helpers
// (el, duration, percent, renderReport). Click a cell (or a rank's header) to open that rank's
// module tree below the map.

const JOB_MAX_ROWS = 400;

function heatColor(fraction) {
  // white (0) to deep orange (1), as the tree's share bars
  const f = Math.max(0, Math.min(1, fraction || 0));
  const mix = (a, b) => Math.round(a + (b - a) * f);
  return `rgb(${mix(255, 230)}, ${mix(255, 81)}, ${mix(255, 0)})`;
}

function jobSummary(doc) {
  const box = el('div', {class: 'tp-job-summary'});
  const ranks = doc.ranks.length;
  box.append(el('div', {}, `${ranks} rank${ranks === 1 ? '' : 's'}` +
      (doc.world_size !== null ? ` of world size ${doc.world_size}` : '') +
      (doc.steps.length ? ` · steps ${doc.steps.join(', ')}` : '')));
  if (doc.missing_ranks.length) {
    box.append(el('div', {class: 'tp-job-warning'}, `missing ranks: ${doc.missing_ranks.join(', ')}`));
  }
  if (doc.stragglers.length) {
    for (const s of doc.stragglers) {
      const mods = s.modules.map((m) => `${m.qualified_name || m.module} +${duration(m.excess_us)}`);
      box.append(el('div', {class: 'tp-job-straggler'},
          `straggler: rank ${s.rank}, +${duration(s.excess_us)} (+${percent(s.excess_fraction)}) ` +
          `over the median${mods.length ? '; modules: ' + mods.join(', ') : ''}`));
    }
  } else {
    box.append(el('div', {}, 'no straggler'));
  }
  for (const w of doc.warnings) box.append(el('div', {class: 'tp-job-warning'}, `warning: ${w}`));
  return box;
}

export function renderJob(doc, {title = null, footer = null} = {}) {
  document.body.classList.add('tp-body');
  const root = el('div', {id: 'traceprof-job'});
  document.body.append(root);
  root.append(el('h2', {class: 'tp-job-title'}, title || 'traceprof job'));
  root.append(jobSummary(doc));
  const ranks = doc.ranks.map((r) => r.rank);
  const modules = doc.modules.slice(0, JOB_MAX_ROWS);
  const metric = doc.metric === 'gpu_busy_us' ? 'GPU busy time' : 'CPU time';
  root.append(el('div', {class: 'tp-job-note'},
      `${metric} per step of each module on each rank (all passes); a cell's color is its share ` +
      'of the row\'s largest. Click a cell or a rank to open that rank\'s module tree.'));
  const status = el('div', {class: 'tp-job-open', id: 'traceprof-job-open'}, '');
  let open = null;
  const openRank = (rank, module) => {
    const profile = doc.profiles && doc.profiles[String(rank)];
    if (!profile) return;
    const old = document.getElementById('traceprof');
    if (old) old.remove();
    for (const c of root.querySelectorAll('.tp-heat-selected')) c.classList.remove('tp-heat-selected');
    for (const c of root.querySelectorAll(`[data-rank="${rank}"]`)) c.classList.add('tp-heat-selected');
    open = rank;
    status.textContent = `rank ${rank}` + (module ? ` · ${module}` : '') + ': module tree below';
    renderReport(profile, {title: `rank ${rank}`, footer: doc.ranks.find((r) => r.rank === rank).path});
  };
  const head = el('tr', {}, el('th', {class: 'tp-heat-module'}, 'module'),
      ...ranks.map((r) => el('th', {class: 'tp-heat-rank', 'data-rank': r,
        title: `open rank ${r}'s tree`, onclick: () => openRank(r, null)}, `r${r}`)));
  const body = el('tbody');
  for (const m of modules) {
    const times = m.times;
    const max = Math.max(0, ...Object.values(times));
    const row = el('tr', {class: `tp-heat-row tp-kind-${m.kind}`},
        el('td', {class: 'tp-heat-module', title: m.qualified_name || m.module,
          style: `padding-left: ${6 + 12 * m.depth}px`}, m.name || m.module));
    for (const r of ranks) {
      const v = times[String(r)];
      const label = v === undefined ? '--' : duration(v);
      const name = m.qualified_name || m.module;
      row.append(el('td', {class: 'tp-heat-cell', 'data-rank': r, 'data-module': m.module,
        style: v === undefined ? null : `background: ${heatColor(max > 0 ? v / max : 0)}`,
        title: `rank ${r} · ${name}: ${label}`, onclick: () => openRank(r, name)}, ''));
    }
    body.append(row);
  }
  root.append(el('div', {class: 'tp-heat-wrap'},
      el('table', {class: 'tp-heat', id: 'traceprof-heatmap'}, el('thead', {}, head), body)));
  if (doc.modules.length > modules.length) {
    root.append(el('div', {class: 'tp-job-note'},
        `the first ${modules.length} of ${doc.modules.length} modules are shown`));
  }
  root.append(status);
  if (footer) root.append(el('div', {class: 'tp-footer'}, footer));
  return {root, openRank, get open() { return open; }};
}
