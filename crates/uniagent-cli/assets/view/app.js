// uniagent view: a framework-free single page over the JSON API (routes on location.hash).
"use strict";

const main = document.getElementById("main");
const warnBox = document.getElementById("warnings");
let poll = null; // the current page's refresh timer

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function fmt(x, d = 3) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return esc(x);
  if (Number.isInteger(x)) return String(x);
  // A value too small for `d` decimals would read as 0: 3 significant digits instead.
  return Math.abs(x) < 0.5 * Math.pow(10, -d) ? String(+x.toPrecision(3)) : x.toFixed(d);
}
function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%"; }

async function api(path) {
  const r = await fetch(path);
  let body;
  try { body = await r.json(); } catch (e) { body = {error: "not JSON: " + r.status}; }
  if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
  return body;
}

function showWarnings(list) {
  const uniq = [...new Set(list || [])];
  warnBox.innerHTML = uniq.map(w => `<div class="warning">⚠ ${esc(w)}</div>`).join("");
}

function parseHash() {
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, qs] = h.split("?");
  return {parts: path.split("/").filter(Boolean), params: new URLSearchParams(qs || "")};
}

async function route() {
  if (poll) { clearInterval(poll); poll = null; }
  const {parts, params} = parseHash();
  try {
    if (parts.length === 0) await runsPage();
    else if (parts[0] === "compare") await comparePage(params);
    else if (parts[0] === "run" && parts.length === 2) await listPage(+parts[1], params);
    else if (parts[0] === "metrics" && parts.length === 2) await metricsPage(+parts[1]);
    else if (parts[0] === "traj" && parts.length === 3) await trajPage(+parts[1], +parts[2], params);
    else main.innerHTML = `<p class="error">No such page.</p>`;
  } catch (e) {
    main.innerHTML = `<p class="error">${esc(e.message)}</p>`;
  }
}
window.addEventListener("hashchange", route);
window.addEventListener("load", route);

// ---------- runs ----------

function histogram(h) {
  const w = 160, hgt = 40, n = h.counts.length, max = Math.max(1, ...h.counts);
  const bars = h.counts.map((c, i) => {
    const bh = Math.round((hgt - 2) * c / max);
    const lo = h.lo + (h.hi - h.lo) * i / n, hi = h.lo + (h.hi - h.lo) * (i + 1) / n;
    return `<rect x="${i * w / n + 1}" y="${hgt - bh}" width="${w / n - 2}" height="${bh}"><title>${fmt(lo, 2)}–${fmt(hi, 2)}: ${c}</title></rect>`;
  }).join("");
  return `<svg class="hist" width="${w}" height="${hgt + 12}" role="img" aria-label="reward distribution">${bars}
    <text x="0" y="${hgt + 11}">${fmt(h.lo, 1)}</text><text x="${w}" y="${hgt + 11}" text-anchor="end">${fmt(h.hi, 1)}</text></svg>`;
}

async function runsPage() {
  let last = "";
  const render = async () => {
    const data = await api("/api/runs");
    const text = JSON.stringify(data);
    if (text === last) return; // unchanged: keep the page (and the form's choices) as it is
    last = text;
    const prev = document.getElementById("compare-form");
    const chosen = prev ? [prev.a.value, prev.b.value] : null;
    showWarnings(data.runs.flatMap(r => r.warnings));
    const rows = data.runs.map(r => {
      const s = r.stats;
      const reasons = Object.entries(s.exit_reasons).map(([k, v]) => `<span class="pill">${esc(k)} ${v}</span>`).join(" ");
      return `<tr class="run-row" data-run="${r.id}">
        <td><a class="open-run" href="#/run/${r.id}">${esc(r.name)}</a><div class="dim">${esc(r.dir)}</div></td>
        <td class="num rollouts">${s.rollouts}</td><td class="num">${s.tasks}</td>
        <td class="num success">${pct(s.success_rate)}</td><td class="num">${fmt(s.mean_reward)}</td>
        <td>${histogram(s.reward_hist)}</td><td>${reasons}</td>
        <td class="num">${s.tokens.prompt} / ${s.tokens.response} / ${s.tokens.sampled}<div class="dim">${fmt(s.tokens.mean_turns, 1)} turns avg</div></td>
        <td class="num">${fmt(s.timings.total, 2)} s<div class="dim">model ${fmt(s.timings.model, 2)} · tools ${fmt(s.timings.tools, 2)} · max ${fmt(s.timings.max_total, 1)}</div></td>
        <td>${r.metric_steps ? `<a href="#/metrics/${r.id}">curves (${r.metric_steps})</a>` : ""}</td></tr>`;
    }).join("");
    const opts = data.runs.map(r => `<option value="${r.id}">${esc(r.name)}</option>`).join("");
    main.innerHTML = `<h1>Runs</h1>
      <table id="runs-table"><thead><tr><th>run</th><th>rollouts</th><th>tasks</th><th>success</th><th>mean reward</th>
      <th>reward distribution</th><th>exit reasons</th><th>tokens prompt / response / sampled</th><th>time per rollout</th><th></th></tr></thead>
      <tbody>${rows}</tbody></table>
      ${data.runs.length > 1 ? `<form id="compare-form" class="bar">Compare <select name="a">${opts}</select> with
        <select name="b">${opts}</select> <button>compare</button></form>` : ""}`;
    const form = document.getElementById("compare-form");
    if (form) {
      [form.a.value, form.b.value] = chosen || [data.runs[0].id, data.runs[1].id];
      form.onsubmit = e => { e.preventDefault(); location.hash = `#/compare?a=${form.a.value}&b=${form.b.value}`; };
    }
  };
  await render();
  poll = setInterval(() => render().catch(() => {}), 3000);
}

// ---------- compare ----------

async function comparePage(params) {
  const a = params.get("a") ?? "0", b = params.get("b") ?? "1";
  const c = await api(`/api/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
  showWarnings(c.warnings);
  const cell = s => `${pct(s.success_rate)} <span class="dim">(${s.rollouts}, r̄ ${fmt(s.mean_reward, 2)})</span>`;
  const rows = c.tasks.map(t => `<tr class="${t.flip || ""}"><td>${esc(t.task_id)}</td><td>${cell(t.a)}</td><td>${cell(t.b)}</td>
    <td class="flip">${t.flip === "gained" ? "▲ gained" : t.flip === "lost" ? "▼ lost" : ""}</td>
    <td><a href="#/run/${c.a.id}?task=${encodeURIComponent(t.task_id)}">A</a> · <a href="#/run/${c.b.id}?task=${encodeURIComponent(t.task_id)}">B</a></td></tr>`).join("");
  main.innerHTML = `<h1>${esc(c.a.name)} (A) vs ${esc(c.b.name)} (B)</h1>
    <p id="compare-summary">${c.common} common tasks · passing ${c.passing[0]} → ${c.passing[1]} ·
      <span class="gained">▲ ${c.gained} gained</span> · <span class="lost">▼ ${c.lost} lost</span> ·
      only in A ${c.only_a}, only in B ${c.only_b}. A task passes when at least half its rollouts succeed.</p>
    <table id="compare-table"><thead><tr><th>task</th><th>A</th><th>B</th><th>flip</th><th>trajectories</th></tr></thead><tbody>${rows}</tbody></table>`;
}

// ---------- trajectory list ----------

// The report (the rows `uniagent report` prints): label and value, reasons indented.
function reportTable(rows) {
  if (!rows || !rows.length) return "";
  const body = rows.map(r => {
    const sub = r.label.startsWith("  ");
    return `<tr class="${sub ? "sub" : ""}"><th>${esc(r.label.trim())}</th>${r.cells.map(c => `<td class="num">${esc(c)}</td>`).join("")}</tr>`;
  }).join("");
  return `<details id="report" open><summary>report</summary><table id="report-table">${body}</table></details>`;
}

const FILTERS = ["task", "exit_reason", "success", "reward_min", "reward_max", "step", "phase", "version", "q"];

async function listPage(run, params) {
  const info = await api(`/api/runs/${run}`);
  const reasons = Object.keys(info.stats.exit_reasons);
  const limit = 50;
  const offset = +(params.get("offset") || 0);
  const val = k => esc(params.get(k) || "");
  main.innerHTML = `<h1>${esc(info.name)} <span class="dim">trajectories</span></h1>
    ${reportTable(info.report_table)}
    <form id="filters" class="bar">
      <input name="q" placeholder="search messages" value="${val("q")}">
      <input name="task" placeholder="task id" value="${val("task")}">
      <select name="exit_reason"><option value="">any exit</option>${reasons.map(r => `<option ${params.get("exit_reason") === r ? "selected" : ""}>${esc(r)}</option>`).join("")}</select>
      <select name="success"><option value="">any result</option><option value="true" ${params.get("success") === "true" ? "selected" : ""}>solved</option><option value="false" ${params.get("success") === "false" ? "selected" : ""}>failed</option></select>
      <input name="reward_min" size="5" placeholder="reward ≥" value="${val("reward_min")}">
      <input name="reward_max" size="5" placeholder="reward ≤" value="${val("reward_max")}">
      <input name="step" size="4" placeholder="step" value="${val("step")}">
      <input name="phase" size="5" placeholder="phase" value="${val("phase")}">
      <input name="version" size="4" placeholder="version" value="${val("version")}">
      <button>apply</button></form>
    <div id="list-status"></div>
    <table id="traj-list"><thead><tr><th>#</th><th>id</th><th>task</th><th>exit</th><th>reward</th><th>turns</th><th>tokens</th><th>step</th><th>phase</th><th>versions</th><th>time</th></tr></thead><tbody></tbody></table>
    <div class="bar"><button id="prev">◀ prev</button> <button id="next">next ▶</button></div>`;
  const form = document.getElementById("filters");
  form.onsubmit = e => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const k of FILTERS) if (form[k].value) q.set(k, form[k].value);
    location.hash = `#/run/${run}?${q}`;
  };
  const query = new URLSearchParams();
  for (const k of FILTERS) if (params.get(k)) query.set(k, params.get(k));
  const go = off => { const q = new URLSearchParams(query); q.set("offset", Math.max(0, off)); location.hash = `#/run/${run}?${q}`; };
  document.getElementById("prev").onclick = () => go(offset - limit);
  document.getElementById("next").onclick = () => go(offset + limit);
  const render = async () => {
    const q = new URLSearchParams(query); q.set("offset", offset); q.set("limit", limit);
    const page = await api(`/api/runs/${run}/trajectories?${q}`);
    showWarnings(info.warnings.concat(page.warnings));
    document.getElementById("list-status").textContent =
      (page.total ? `${offset + 1}–${offset + page.items.length} of ${page.total}` : "no trajectories match") +
      (page.indexing ? " (still indexing the file…)" : "");
    document.getElementById("prev").disabled = offset === 0;
    document.getElementById("next").disabled = offset + limit >= page.total;
    document.querySelector("#traj-list tbody").innerHTML = page.items.map(t => `<tr class="traj-row ${t.success ? "ok" : t.success === false ? "bad" : ""}">
      <td>${t.index}</td><td><a class="open-traj" href="#/traj/${run}/${t.index}">${esc(t.id)}</a></td><td>${esc(t.task_id)}</td>
      <td>${esc(t.exit_reason)}</td><td>${fmt(t.score, 2)} ${t.success ? "✓" : t.success === false ? "✗" : ""}</td>
      <td>${t.turns}</td><td>${t.prompt_tokens}+${t.response_tokens} <span class="dim">(${t.sampled_tokens} sampled)</span></td>
      <td>${t.step ?? "–"}</td><td>${esc(t.phase ?? "–")}</td><td>${t.version_min === null ? "–" : t.version_min === t.version_max ? t.version_min : t.version_min + "–" + t.version_max}</td>
      <td>${fmt(t.timings.total, 2)} s</td></tr>`).join("");
  };
  await render();
  poll = setInterval(() => render().catch(() => {}), 3000); // new rollouts appear without a reload
}

// ---------- one trajectory ----------

const FOLD_CHARS = 1500, FOLD_LINES = 25;

function textBlock(s) {
  s = String(s ?? "");
  const lines = s.replace(/\n$/, "").split("\n").length;
  if (s.length <= FOLD_CHARS && lines <= FOLD_LINES) return `<pre>${esc(s)}</pre>`;
  const head = s.split("\n").slice(0, 8).join("\n").slice(0, 600);
  return `<details class="fold"><summary><pre>${esc(head)}</pre><span class="dim">… ${lines} lines, ${s.length} chars (click to unfold)</span></summary><pre>${esc(s)}</pre></details>`;
}

function content(c) {
  if (c === null || c === undefined) return "";
  if (typeof c === "string") return textBlock(c);
  if (Array.isArray(c)) return c.map(p => p.type === "text" ? textBlock(p.text) : `<pre>${esc(JSON.stringify(p))}</pre>`).join("");
  return `<pre>${esc(JSON.stringify(c, null, 2))}</pre>`;
}

function prettyArgs(a) {
  try { return JSON.stringify(typeof a === "string" ? JSON.parse(a) : a, null, 2); } catch (e) { return String(a); }
}

function chat(messages) {
  return messages.map((m, i) => {
    const calls = (m.tool_calls || []).map(tc => `<div class="tool-call"><b>→ ${esc(tc.function?.name)}</b>
      <span class="dim">${esc(tc.id || "")}</span>${textBlock(prettyArgs(tc.function?.arguments))}</div>`).join("");
    const reasoning = m.reasoning_content ? `<details class="reasoning"><summary>reasoning</summary>${textBlock(m.reasoning_content)}</details>` : "";
    const who = m.role === "tool" ? `tool ${esc(m.name || "")} <span class="dim">${esc(m.tool_call_id || "")}</span>` : esc(m.role);
    return `<div class="msg ${esc(m.role)}" data-index="${i}"><div class="role">${who}</div>${reasoning}${content(m.content)}${calls}</div>`;
  }).join("");
}

function rewardDetails(r) {
  if (!r) return `<p class="dim">no reward</p>`;
  const d = r.details || {};
  let out = `<p>score <b>${fmt(r.score)}</b> · ${r.success ? "solved ✓" : "not solved ✗"}</p>`;
  // Per-test results: any object mapping test ids to statuses.
  for (const [k, v] of Object.entries(d)) {
    if (v && typeof v === "object" && !Array.isArray(v) && Object.values(v).every(x => typeof x === "string")) {
      out += `<h4>${esc(k)}</h4><table class="tests">${Object.entries(v).map(([t, s]) =>
        `<tr class="${/pass/i.test(s) ? "ok" : /fail|error/i.test(s) ? "bad" : ""}"><td>${esc(t)}</td><td>${esc(s)}</td></tr>`).join("")}</table>`;
    }
  }
  const expected = d.expected ?? d.expected_answer ?? d.answers ?? d.ground_truth;
  const given = d.given ?? d.answer ?? d.prediction ?? d.response;
  if (expected !== undefined || given !== undefined) {
    out += `<table class="answers"><tr><th>expected</th><td>${esc(JSON.stringify(expected))}</td></tr><tr><th>given</th><td>${esc(JSON.stringify(given))}</td></tr></table>`;
  }
  return out + `<details><summary>all details</summary><pre>${esc(JSON.stringify(d, null, 2))}</pre></details>`;
}

function heat(lp) {
  // logprob 0 → white, −5 or less → deep red.
  const t = Math.min(1, Math.max(0, -lp / 5));
  return `rgb(255,${Math.round(255 - 170 * t)},${Math.round(255 - 200 * t)})`;
}
const VERSION_COLOURS = ["#cfe3ff", "#d7f5d0", "#ffe7b8", "#f4d0f5", "#d0f5f1", "#f5d6d0"];

// One stream token (with the prompt/turn markers before it); `cls` adds diff classes.
function tokenHtml(tv, i, mode, starts, partial, cls) {
  let pre = "";
  if (i === tv.prompt_len) pre += `<div class="boundary prompt-end">response</div>`;
  if (starts.has(i)) pre += `<span class="turn-mark" title="turn ${tv.turn[i]} starts">turn ${tv.turn[i]}</span>`;
  // Newlines are tokens too: show them (↵) so their colour is visible. A token holding only
  // the first bytes of a character shows ⋯; the character is on the token that completes it.
  let text = tv.text ? tv.text[i].replace(/\n/g, "↵\n") : `⟨${tv.ids[i]}⟩`;
  if (partial.has(i)) { text = "⋯"; cls += " partial"; }
  const lp = tv.logprob[i], v = tv.version[i], m = tv.mask[i];
  let style = "";
  // Logprobs mean something on sampled tokens only (0.0 is a placeholder elsewhere).
  if (mode === "logprob") style = m === 1 && lp !== null ? `background:${heat(lp)}` : "background:#fff;color:#999";
  if (mode === "version" && v !== null) style = `background:${VERSION_COLOURS[v % VERSION_COLOURS.length]}`;
  let tip = `#${i} id ${tv.ids[i]} · ${tv.source[i]} · mask ${m ?? "–"} · logprob ${lp === null ? "–" : lp.toFixed(3)} · version ${v ?? "–"} · turn ${tv.turn[i]}`;
  if (partial.has(i)) tip += " · first bytes of a character completed by a later token";
  if (cls.includes("del")) tip += " · not in the full re-render";
  return `${pre}<span class="tok src-${tv.source[i]} ${m === 1 ? "m1" : m === 0 ? "m0" : ""} ${cls}" style="${style}" title="${esc(tip)}">${esc(text)}</span>`;
}

// The stream aligned with the template's full re-render: deleted tokens struck out, tokens
// only the re-render has inserted in green.
function diffParts(tv, mode, starts, partial) {
  const parts = [];
  let i = 0;
  for (const run of tv.rerender.runs) {
    if (run.op === "insert") {
      run.ids.forEach((id, k) => {
        const text = run.text ? run.text[k].replace(/\n/g, "↵\n") : `⟨${id}⟩`;
        parts.push(`<span class="tok ins" title="${esc(`only in the full re-render · id ${id}`)}">${esc(text)}</span>`);
      });
      continue;
    }
    for (let k = 0; k < run.len; k++, i++) parts.push(tokenHtml(tv, i, mode, starts, partial, run.op === "delete" ? "del" : ""));
  }
  return parts;
}

function tokenView(tv, mode, diff) {
  const n = tv.ids.length;
  const starts = new Set(tv.turn_starts);
  const partial = new Set(tv.partial || []);
  const r = tv.rerender;
  const diffing = diff && r && r.aligned;
  const parts = diffing ? diffParts(tv, mode, starts, partial) : tv.ids.map((_, i) => tokenHtml(tv, i, mode, starts, partial, ""));
  const counts = {};
  tv.source.forEach(s => counts[s] = (counts[s] || 0) + 1);
  const legend = Object.entries(counts).map(([s, c]) => `<span class="tok src-${s}">${s}</span> ${c}`).join(" · ");
  const toggle = r ? `<label id="diff-toggle"> · <input type="checkbox" id="diff-box" ${diff ? "checked" : ""}> diff vs. full re-render</label>` : "";
  let summary = "";
  if (diff && r) summary = r.aligned
    ? `<p id="diff-summary">full re-render: ${r.len} tokens · <span class="tok del">${r.deleted}</span> only in the recorded stream · <span class="tok ins">${r.inserted}</span> only in the re-render</p>`
    : `<p id="diff-summary" class="bad">the stream and its re-render differ by too many tokens to align here</p>`;
  return `<div class="bar" id="token-modes">colour by
      ${["source", "logprob", "version"].map(m => `<label><input type="radio" name="mode" value="${m}" ${m === mode ? "checked" : ""}> ${m}</label>`).join(" ")}${toggle}</div>
    <p id="token-legend">${n} tokens (${tv.prompt_len} prompt): ${legend} · <span class="tok m1">underlined</span> = mask 1 (trained on)
      ${tv.sources_inferred ? `<span class="dim">· template/observation inferred from special tokens</span>` : `<span class="dim">· sources as recorded</span>`}
      ${mode === "logprob" ? ` · <span class="tok" style="background:${heat(0)}">0</span><span class="tok" style="background:${heat(-2.5)}">−2.5</span><span class="tok" style="background:${heat(-5)}">≤−5</span>` : ""}</p>
    ${summary}<div id="tokens" class="tokens">${parts.join("")}</div>`;
}

async function trajPage(run, index, params) {
  const d = await api(`/api/runs/${run}/trajectories/${index}`);
  showWarnings(d.warnings);
  const t = d.trajectory;
  const view = params.get("view") || "chat";
  const mode = params.get("mode") || "source";
  const diff = params.get("diff") === "1";
  const tm = t.timings || {};
  const tabs = `<div class="tabs"><a id="tab-chat" class="${view === "chat" ? "active" : ""}" href="#/traj/${run}/${index}?view=chat">Conversation</a>
    <a id="tab-tokens" class="${view === "tokens" ? "active" : ""}" href="#/traj/${run}/${index}?view=tokens">Tokens</a></div>`;
  let body;
  if (view === "tokens") body = d.tokens ? tokenView(d.tokens, mode, diff) : `<p class="dim" id="no-tokens">This run's backend recorded no token data.</p>`;
  else body = `<div id="chat">${chat(t.messages || [])}</div>`;
  main.innerHTML = `<p><a href="#/run/${run}">← ${esc("list")}</a> ·
      <a href="#/traj/${run}/${Math.max(0, index - 1)}?view=${view}">prev</a> · <a href="#/traj/${run}/${index + 1}?view=${view}">next</a></p>
    <h1 id="traj-title">${esc(t.id)}</h1>
    <div class="cards">
      <div class="card"><h3>outcome</h3><p>exit <b id="exit-reason">${esc(t.exit_reason)}</b>${t.masked ? ` · <span class="bad">masked</span>` : ""}</p>
        ${d.append_only === false ? `<p id="not-append-only" class="bad">token trace not append-only</p>` : ""}
        ${t.error ? `<pre class="error">${esc(t.error)}</pre>` : ""}
        <p>task ${esc(t.task_id)} · sample ${fmt(t.sample)}${t.step !== undefined ? ` · step ${t.step}` : ""}${t.phase ? ` · ${esc(t.phase)}` : ""}</p></div>
      <div class="card"><h3>reward</h3>${rewardDetails(t.reward)}</div>
      <div class="card"><h3>timings (s)</h3><table>${Object.entries(tm).map(([k, v]) => `<tr><td>${esc(k)}</td><td class="num">${fmt(v, 3)}</td></tr>`).join("")}</table>
        <p class="dim">${fmt(t.counts?.turns)} turns · ${fmt(t.counts?.tool_calls)} tool calls · ${fmt(t.counts?.format_errors)} format errors</p></div>
    </div>${tabs}${body}`;
  for (const r of document.querySelectorAll("#token-modes input[name=mode]")) {
    r.onchange = () => { location.hash = `#/traj/${run}/${index}?view=tokens&mode=${r.value}${diff ? "&diff=1" : ""}`; };
  }
  const box = document.getElementById("diff-box");
  if (box) box.onchange = () => { location.hash = `#/traj/${run}/${index}?view=tokens&mode=${mode}${box.checked ? "&diff=1" : ""}`; };
}

// ---------- learning curves ----------

const CHARTS = [
  {title: "Reward and success", y: "value", keys: ["mean_reward", "success_rate", "held_out_success"]},
  {title: "KL and entropy", y: "nats", keys: ["kl", "entropy", "kl_behaviour_current"]},
  {title: "Clip fraction", y: "fraction", keys: ["pg_clipfrac"]},
  {title: "Staleness", y: "versions", keys: ["staleness"]},
  {title: "Loss", y: "loss", keys: ["loss", "pg_loss"]},
];
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];

function niceTicks(lo, hi, n = 5) {
  if (hi === lo) { hi = lo + 1; }
  const step0 = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= step0);
  const out = [];
  // Rounded to the step's own precision, so that no float residue (0.30000000000000004) stays.
  const snap = v => +(Math.round(v / step) * step).toPrecision(12);
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(snap(k * step));
  out.step = step;
  return out;
}

// A tick label short enough for the axis: as many digits as the tick spacing `step` needs
// to tell ticks apart (no float residue, trailing zeros dropped), in scientific notation
// (6e-8, 1.5e6) for magnitudes below 1e-3 or from 1e5 on, where fixed notation gets long.
function tickLabel(v, step) {
  const a = Math.abs(v), s = Math.abs(step);
  if (a <= s * 1e-6) return "0";
  const exp = Math.floor(Math.log10(a) + 1e-9), stepExp = Math.floor(Math.log10(s) + 1e-9);
  if (a < 1e-3 || a >= 1e5) {
    const [m, e] = v.toExponential(Math.max(0, Math.min(6, exp - stepExp))).split("e");
    return `${+m}e${+e}`;
  }
  return String(+v.toFixed(Math.max(0, Math.min(10, -stepExp))));
}

function lineChart(spec, steps, series) {
  const keys = spec.keys.filter(k => series[k] && series[k].some(v => v !== null));
  if (!keys.length || !steps.length) return "";
  const W = 560, H = 320, L = 60, R = 20, T = 56, B = 48;
  const vals = keys.flatMap(k => series[k].filter(v => v !== null));
  let ylo = Math.min(0, ...vals), yhi = Math.max(...vals);
  if (yhi === ylo) yhi = ylo + 1;
  const xlo = Math.min(...steps), xhi = Math.max(...steps) === xlo ? xlo + 1 : Math.max(...steps);
  const X = x => L + (W - L - R) * (x - xlo) / (xhi - xlo), Y = y => H - B - (H - T - B) * (y - ylo) / (yhi - ylo);
  const xt = niceTicks(xlo, xhi), yt = niceTicks(ylo, yhi);
  // Round the top up to a tick so the highest grid line frames the data.
  if (yt[yt.length - 1] < yhi - yt.step * 1e-9) { yhi = +(yt[yt.length - 1] + yt.step).toPrecision(12); yt.push(yhi); }
  let svg = `<svg class="chart" width="${W}" height="${H}" role="img" aria-label="${esc(spec.title)}">
    <text class="title" x="${W / 2}" y="18" text-anchor="middle">${esc(spec.title)}</text>`;
  for (const y of yt) svg += `<line class="grid" x1="${L}" x2="${W - R}" y1="${Y(y)}" y2="${Y(y)}"/><text x="${L - 6}" y="${Y(y) + 4}" text-anchor="end">${tickLabel(y, yt.step)}</text>`;
  for (const x of xt) svg += `<line class="tick" x1="${X(x)}" x2="${X(x)}" y1="${H - B}" y2="${H - B + 5}"/><text x="${X(x)}" y="${H - B + 18}" text-anchor="middle">${tickLabel(x, xt.step)}</text>`;
  svg += `<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/><line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>
    <text class="label" x="${(L + W - R) / 2}" y="${H - 8}" text-anchor="middle">step</text>
    <text class="label" transform="translate(14 ${(T + H - B) / 2}) rotate(-90)" text-anchor="middle">${esc(spec.y)}</text>`;
  keys.forEach((k, i) => {
    const pts = steps.map((s, j) => [s, series[k][j]]).filter(p => p[1] !== null);
    const c = COLOURS[i % COLOURS.length];
    svg += `<polyline class="series" data-key="${esc(k)}" fill="none" stroke="${c}" stroke-width="2" points="${pts.map(p => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" ")}"/>`;
    svg += pts.map(p => `<circle cx="${X(p[0]).toFixed(1)}" cy="${Y(p[1]).toFixed(1)}" r="2.5" fill="${c}"><title>${esc(k)} step ${p[0]}: ${fmt(p[1])}</title></circle>`).join("");
    // Legend in a row between the title and the plot, so it never covers a line.
    const lx = L + 150 * i;
    svg += `<g class="legend"><rect x="${lx}" y="${T - 18}" width="14" height="3" fill="${c}"/><text x="${lx + 18}" y="${T - 13}">${esc(k)}</text></g>`;
  });
  return svg + "</svg>";
}

async function metricsPage(run) {
  let last = "";
  const render = async () => {
    const [info, m] = await Promise.all([api(`/api/runs/${run}`), api(`/api/runs/${run}/metrics`)]);
    const text = JSON.stringify(m);
    if (text === last) return;
    last = text;
    showWarnings(m.warnings);
    const charts = CHARTS.map(c => lineChart(c, m.steps, m.series)).join("");
    main.innerHTML = `<h1>${esc(info.name)} <span class="dim">learning curves (${m.steps.length} steps)</span></h1>
      <div id="charts">${charts || `<p class="dim">no metrics.jsonl yet</p>`}</div>`;
  };
  await render();
  poll = setInterval(() => render().catch(() => {}), 5000);
}
