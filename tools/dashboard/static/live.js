// The live dashboard: asks /api/state every two seconds and draws each panel with uPlot.
// What a panel draws (its lines, reference lines and notes) is computed by the server
// (tools/dashboard/panels.py, the computation the PNG draws too); this script only paints it.
"use strict";

window.dashboardErrors = [];
window.addEventListener("error", (event) => window.dashboardErrors.push(String(event.message)));

// matplotlib's tab10, so a worker has the colour it has in the PNG.
const TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const charts = new Map();  // panel title -> {plot, signature}
let updates = 0;

function colour(line, index, workers) {
  if (line.worker !== null) return TAB10[workers.indexOf(line.worker) % 10];
  if (line.colour_index !== null) return TAB10[line.colour_index % 10];
  return TAB10[index % 10];
}

function fromZero(u, min, max) {
  return [0, max > 0 ? max * 1.1 : 1];
}

function seriesData(panel) {
  const xs = [...new Set(panel.lines.flatMap((line) => line.x))].sort((a, b) => a - b);
  const columns = panel.lines.map((line) => {
    const at = new Map(line.x.map((x, i) => [x, line.y[i]]));
    return xs.map((x) => (at.has(x) ? at.get(x) : null));
  });
  const guides = panel.guides.filter((g) => g.drawn).map((g) => xs.map(() => g.value));
  return [xs, ...columns, ...guides];
}

function options(panel, workers, width) {
  const right = panel.lines.some((l) => l.right) || panel.guides.some((g) => g.right);
  const series = [{ label: "t+ s" }];
  panel.lines.forEach((line, i) => series.push({
    label: line.label, stroke: colour(line, i, workers), width: 1.5,
    dash: line.dashed ? [6, 4] : undefined, scale: line.right ? "y2" : "y",
    points: { show: true, size: 4 }, spanGaps: false,
  }));
  panel.guides.filter((g) => g.drawn).forEach((g) => series.push({
    label: g.label, stroke: "#888", dash: [4, 4], width: 1, scale: g.right ? "y2" : "y",
    points: { show: false },
  }));
  const axes = [{ label: "t+ seconds" }, { label: panel.y_label, scale: "y" }];
  if (right) axes.push({ label: panel.right_label, scale: "y2", side: 1, grid: { show: false } });
  return {
    width, height: 240, series, axes,
    scales: { x: { time: false }, y: { range: fromZero }, y2: { range: fromZero } },
    legend: { live: false },
  };
}

function notesList(panel) {
  const list = document.createElement("ul");
  list.className = "notes";
  const offChart = panel.guides.filter((g) => !g.drawn).map((g) => g.label);
  for (const text of [...offChart, ...panel.notes]) {
    const item = document.createElement("li");
    item.textContent = text;
    list.appendChild(item);
  }
  for (const name of panel.unexplained) {
    const item = document.createElement("li");
    item.className = "unexplained";
    item.textContent = `no data points for ${name} (unexplained)`;
    list.appendChild(item);
  }
  return list;
}

function panelSection(panel) {
  let section = document.querySelector(`section.panel[data-title="${CSS.escape(panel.title)}"]`);
  if (!section) {
    section = document.createElement("section");
    section.className = "panel";
    section.dataset.title = panel.title;
    const heading = document.createElement("h2");
    heading.textContent = panel.title;
    section.appendChild(heading);
    section.appendChild(document.createElement("div")).className = "body";
    section.appendChild(document.createElement("div")).className = "notes-box";
    document.getElementById("panels").appendChild(section);
  }
  return section;
}

function drawPanel(panel, workers) {
  const section = panelSection(panel);
  const body = section.querySelector(".body");
  section.querySelector(".notes-box").replaceChildren(notesList(panel));
  section.dataset.lines = String(panel.lines.length);
  section.dataset.guides = String(panel.guides.filter((g) => g.drawn).length);
  if (panel.lines.length === 0) {
    const known = charts.get(panel.title);
    if (known) { known.plot.destroy(); charts.delete(panel.title); }
    const empty = document.createElement("div");
    empty.className = "empty";
    empty.textContent = "nothing to draw here: " + [...panel.notes, ...panel.unexplained].join("; ");
    body.replaceChildren(empty);
    section.dataset.drawn = "empty";
    return;
  }
  const data = seriesData(panel);
  const signature = JSON.stringify([panel.lines.map((l) => l.label), panel.guides.map((g) => g.label)]);
  const known = charts.get(panel.title);
  if (known && known.signature === signature) {
    known.plot.setData(data);
  } else {
    if (known) known.plot.destroy();
    body.replaceChildren();
    const width = Math.max(body.clientWidth || section.clientWidth - 16, 400);
    charts.set(panel.title, { plot: new uPlot(options(panel, workers, width), data, body), signature });
  }
  section.dataset.drawn = "chart";
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "-" : String(text);
  row.appendChild(td);
}

function drawLeases(leases) {
  const error = document.getElementById("leases-error");
  error.hidden = !leases.error;
  error.textContent = leases.error || "";
  const rows = (leases.rows || []).map((lease) => {
    const tr = document.createElement("tr");
    const lag = lease.lag_millis === null || lease.lag_millis === undefined ? null
      : Math.round(lease.lag_millis).toLocaleString();
    for (const value of [lease.shard, lease.owner, lease.checkpoint, lease.counter,
                         (lease.parents || []).join(", "), lease.state, lag]) cell(tr, value);
    return tr;
  });
  document.querySelector("#lease-rows tbody").replaceChildren(...rows);
  const workers = (leases.workers || []).map((worker) => {
    const tr = document.createElement("tr");
    const age = worker.heartbeat_age_seconds === null ? "no heartbeat row" : `${worker.heartbeat_age_seconds} s`;
    for (const value of [worker.worker, worker.leases, age, worker.alive ? "yes" : "no"]) cell(tr, value);
    return tr;
  });
  document.querySelector("#worker-rows tbody").replaceChildren(...workers);
}

function count(value) {
  return Math.round(value || 0).toLocaleString();
}

function draw(state) {
  document.getElementById("title").textContent = state.title;
  document.getElementById("source").textContent =
    `from ${state.source}; each point: the next ${state.bucket_seconds} s; counters as rates per second`;
  document.getElementById("records-processed").textContent = count(state.totals.RecordsProcessed);
  document.getElementById("table-writes").textContent = count(state.totals.TableWrites);
  document.getElementById("stream-reads").textContent = count(state.totals.StreamReadRequests);
  document.getElementById("documents").textContent = count(state.documents);
  document.getElementById("workers").textContent = state.workers.join(", ") || "none yet";
  document.getElementById("elapsed").textContent = `${state.elapsed_seconds} s`;
  const error = document.getElementById("error");
  error.hidden = !state.error;
  error.textContent = state.error || "";
  for (const panel of state.panels) drawPanel(panel, state.workers);
  drawLeases(state.leases);
  updates += 1;
  document.body.dataset.updates = String(updates);
}

async function refresh() {
  try {
    const answer = await fetch("/api/state", { cache: "no-store" });
    if (!answer.ok) throw new Error(`/api/state answered ${answer.status}`);
    draw(await answer.json());
  } catch (exc) {
    const error = document.getElementById("error");
    error.hidden = false;
    error.textContent = `the dashboard server does not answer (${exc.message}); retrying`;
  } finally {
    setTimeout(refresh, 2000);
  }
}

refresh();
