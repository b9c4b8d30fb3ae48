// The rollout browser: runs (evaluation runs under theirs) -> a run's steps, evaluations, groups and
// rollouts -> one rollout's prefix tree, verifier output and harness stderr.
// No build step, no framework. Everything from the store is untrusted agent output: it enters the
// DOM only through text nodes (el() below, textContent), never as markup.
"use strict";

const page = document.getElementById("page");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(headers, rows) {
  return el("table", {}, el("tr", {}, headers.map((h) => el("th", {}, h))),
    rows.map((r) => el("tr", r.attrs || {}, r.cells.map((c) => el("td", {}, c)))));
}

const fmt = (x) => (x === null || x === undefined ? "–" : typeof x === "number" ? +x.toFixed(4) : String(x));
const when = (t) => (t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) : "–");
const link = (href, text) => el("a", { href }, text);

async function api(path) {
  const reply = await fetch("api/" + path);
  const body = await reply.json();
  if (!reply.ok) throw new Error(body.detail || reply.statusText);
  return body;
}

// --- pages ---

const runLink = (id) => link("#/run/" + encodeURIComponent(id), id);

async function showRuns() {
  const { runs } = await api("runs");
  // an evaluation run goes under the run it evaluated, when that run is listed
  const listed = new Set(runs.map((r) => r.id));
  const evalsOf = new Map();
  for (const r of runs) if (r.of_run && listed.has(r.of_run)) evalsOf.set(r.of_run, [...(evalsOf.get(r.of_run) || []), r]);
  const rows = [];
  for (const r of runs) {
    if (r.of_run && listed.has(r.of_run)) continue;
    rows.push({ attrs: { class: "run-row", "data-run": r.id }, cells: [runLink(r.id), r.name, r.status, when(r.created_at)] });
    for (const e of (evalsOf.get(r.id) || []).reverse()) {
      rows.push({ attrs: { class: "eval-run", "data-run": e.id, "data-of-run": r.id },
        cells: [el("span", { class: "nested" }, "↳ ", runLink(e.id)), `${e.name} · evaluates v${fmt(e.config.version)}`, e.status, when(e.created_at)] });
    }
  }
  return [el("h2", {}, "runs"), table(["run", "name", "status", "created"], rows)];
}

function stepsTable(columns, steps) {
  // one column per scalar metric; the step's whole JSON (lists included) in its row's tooltip
  return el("div", { class: "wide" }, table(["step", ...columns, "at"],
    steps.map((s) => ({ attrs: { class: "step-row", "data-step": s.step, title: JSON.stringify(s.metrics) },
      cells: [s.step, ...columns.map((c) => fmt(s.metrics[c])), when(s.created_at)] }))));
}

function evaluationsTable(evaluations) {
  const harnesses = [...new Set(evaluations.flatMap((e) => Object.keys(e.pass_at_1)))];
  return table(["evaluation run", "version", "suite", ...harnesses.map((h) => `${h} Pass@1`), "status", "created"],
    evaluations.map((e) => ({ attrs: { class: "eval-row", "data-run": e.id },
      cells: [runLink(e.id), fmt(e.version), e.suite, ...harnesses.map((h) => fmt(e.pass_at_1[h])), e.status, when(e.created_at)] })));
}

async function showRun(runId) {
  const { run, step_columns, steps, evaluations, checkpoints, groups } = await api("runs/" + encodeURIComponent(runId));
  const out = [el("h2", {}, "run ", run.name, " ", el("code", {}, run.id), " · ", run.status)];
  if (run.of_run) out.push(el("p", { id: "evaluates" }, "evaluates run ", runLink(run.of_run), ` at policy v${fmt(run.config.version)}`));
  out.push(el("h3", {}, "steps"), stepsTable(step_columns, steps));
  if (evaluations.length) out.push(el("h3", {}, "evaluations"), evaluationsTable(evaluations));
  out.push(el("h3", {}, "checkpoints"), table(["version", "step", "groups consumed", "uri"],
    checkpoints.map((c) => ({ cells: [c.version, c.step, c.groups, c.uri] }))));
  out.push(el("h3", {}, "groups"));
  for (const g of groups) {
    const state = g.ready_at ? "complete" : `${g.ended}/${g.size} ended`;
    const consumed = g.consumed_version === null ? "not trained yet" : `trained by step ${fmt(g.consumed_by_step)} (v${g.consumed_version})`;
    out.push(el("h4", { class: "group" }, "group ", el("code", {}, g.id), ` · ${g.size} rollouts · ${state} · ${consumed}`));
    out.push(table(["rollout", "task", "harness", "status", "reward", "passed", "verifier", "error"],
      g.rollouts.map((r) => ({ attrs: { class: "rollout-row" }, cells: [link("#/rollout/" + encodeURIComponent(r.id), r.id),
        r.task_id, r.harness, r.status, fmt(r.reward), fmt(r.passed), r.verifier.slice(0, 200), (r.error || "").slice(0, 200)] }))));
  }
  return out;
}

async function showRollout(rolloutId) {
  const { rollout: r, tree } = await api("rollouts/" + encodeURIComponent(rolloutId));
  const out = [el("h2", {}, "rollout ", el("code", {}, r.id)),
    el("p", {}, "run ", link("#/run/" + encodeURIComponent(r.run_id), r.run_id), ` · group ${r.group_id} · task ${r.task_id}`,
      ` · ${r.harness} · ${r.status} · reward ${fmt(r.reward)} · passed ${fmt(r.passed)}`)];
  if (r.error) out.push(el("p", { class: "error" }, r.error));
  // why a task outcome was what it was: what the verifier printed, how the harness ended
  if (r.verifier_output) out.push(el("h3", {}, "verifier output"), el("pre", { id: "verifier-output", class: "output" }, r.verifier_output));
  if (r.harness_stderr) out.push(el("h3", {}, "harness stderr (tail)"), el("pre", { id: "harness-stderr", class: "output" }, r.harness_stderr));
  if (!tree) return [...out, el("p", {}, "no calls were captured")];
  const s = tree.stats;
  out.push(el("p", { id: "stats" }, `${tree.calls.length} calls · `, el("span", { id: "node-count" }, tree.nodes.length),
    ` nodes · ${s.unique_tokens} unique / ${s.path_tokens} path tokens · ${s.trainable_tokens} generated · ${s.branch_points} branch points`));
  out.push(el("p", { class: "legend" }, el("span", { class: "span-shared" }, "shared context"),
    el("span", { class: "span-prompt" }, "one call's context"), el("span", { class: "span-generated" }, "generated")));
  out.push(el("h3", {}, "calls"), table(["seq", "protocol", "version", "temperature", "prompt", "output", "finish", "latency s"],
    tree.calls.map((c) => ({ attrs: { class: "call-row", "data-call": c.seq, onmouseover: () => showCall(tree, c.seq) },
      cells: [c.seq, c.protocol, c.policy_version, fmt(c.temperature), c.n_prompt, c.n_output, c.finish_reason, fmt(c.latency_s)] }))));
  out.push(el("h3", {}, "prefix tree"), renderTree(tree));
  return out;
}

// --- the tree ---

function renderTree(tree) {
  const children = new Map([[-1, []]]);
  for (const n of tree.nodes) children.set(n.id, []);
  for (const n of tree.nodes) children.get(n.parent).push(n);
  const list = (parent) => {
    const kids = children.get(parent);
    return el("ul", { class: parent === -1 ? "tree" : null }, kids.map((n) => renderNode(tree, n, kids.length > 1, list)));
  };
  return list(-1);
}

function renderNode(tree, n, isBranch, list) {
  const tokens = el("div", { class: "tokens" }, n.spans.map((sp) => renderSpan(tree, n, sp)));
  const head = el("div", { class: "node-head" }, `node ${n.id} · ${n.token_ids.length} tok at ${n.depth} · calls ${n.calls.join(",")}`,
    n.ends.length ? ` · ends call ${n.ends.join(",")} ■` : "");
  const kids = n.children.length ? list(n.id) : null;
  return el("li", { class: "node" + (isBranch ? " branch" : ""), "data-node": n.id, "data-calls": n.calls.join(",") }, head, tokens, kids);
}

function tokenText(n, k) {
  return n.text ? n.text[k] : n.token_ids[k] + " ";
}

function renderSpan(tree, n, sp) {
  const attrs = { class: "span span-" + sp.kind, "data-kind": sp.kind, "data-call": sp.call,
    onmouseover: () => showCall(tree, sp.call === null ? n.calls[0] : sp.call, null) };
  if (sp.kind !== "generated") {
    let text = "";
    for (let k = sp.start; k < sp.end; k++) text += tokenText(n, k);
    return el("span", attrs, text);
  }
  const toks = [];
  for (let k = sp.start; k < sp.end; k++) {
    const info = { logprob: n.logprobs[k], version: n.versions[k], temperature: n.temperatures[k], token: n.token_ids[k] };
    toks.push(el("span", { class: "tok", title: `logprob ${fmt(info.logprob)} · version ${info.version} · T ${fmt(info.temperature)} · call ${sp.call}`,
      onmouseover: (e) => { e.stopPropagation(); showCall(tree, sp.call, info); } }, tokenText(n, k)));
  }
  return el("span", attrs, toks);
}

// --- the detail panel (hover) ---

function showCall(tree, seq, token) {
  const c = tree.calls.find((x) => x.seq === seq);
  if (!c) return;
  document.getElementById("detail").hidden = false;
  document.getElementById("detail-title").textContent = `call ${c.seq}` + (token ? ` · token ${token.token}` : "");
  const fields = { protocol: c.protocol, policy_version: c.policy_version, temperature: fmt(c.temperature),
    finish_reason: c.finish_reason, latency_s: fmt(c.latency_s), prompt_tokens: c.n_prompt, output_tokens: c.n_output };
  if (token) Object.assign(fields, { token_logprob: fmt(token.logprob), token_version: token.version });
  const dl = document.getElementById("detail-fields");
  dl.replaceChildren(...Object.entries(fields).flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
  document.getElementById("detail-logprobs").textContent = c.output_logprobs.map(fmt).join(" ");
  document.getElementById("detail-request").textContent = JSON.stringify(c.request, null, 2);
  document.getElementById("detail-response").textContent = JSON.stringify(c.response, null, 2);
}

// --- routing ---

async function route() {
  const [, kind, id] = (location.hash || "#/").slice(1).split("/").map(decodeURIComponent);
  document.getElementById("detail").hidden = true;
  document.getElementById("where").textContent = kind ? `· ${kind} ${id}` : "";
  try {
    const parts = kind === "run" ? await showRun(id) : kind === "rollout" ? await showRollout(id) : await showRuns();
    page.replaceChildren(...parts);
    page.setAttribute("data-loaded", kind || "runs");
  } catch (e) {
    page.replaceChildren(el("p", { class: "error" }, "could not load: ", e.message));
    page.setAttribute("data-loaded", "error");
  }
}

window.addEventListener("hashchange", route);
route();
