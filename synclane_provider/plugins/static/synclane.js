// The SyncLane page: five views over the JSON endpoints of this app, refreshed every few seconds, and the
// operator's actions (each confirmed, each answered with what it changed). Every URL is relative, so the
// page works wherever Airflow mounts it (a proxy, a base path).
"use strict";

const REFRESH_MS = 5000;
const state = {
  view: "queues", queue: null, queues: [],
  cursor: null, next: null,        // where the current page starts, and where the next would
  jobFilters: {}, ownerFilters: {}, detail: null,
  params: new URLSearchParams(location.search),
};
const $ = (selector, root = document) => root.querySelector(selector);

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
}
function when(iso) { return iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC") : "–"; }
function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}
// A lane's next due job: a time in the past means the job is waiting for the lane (or a slot), not scheduled.
function nextDue(iso) {
  if (!iso) return "–";
  const late = (Date.now() - Date.parse(iso)) / 1000;
  return late > 1 ? `<span class="overdue" title="due ${when(iso)}">overdue ${age(late)}</span>` : when(iso);
}
// When a job runs next: nothing for a job that is over (completed, or abandoned until someone requeues it).
function nextRun(job, held) {
  if (job.status === "abandoned") return '<span class="muted">never (requeue to run)</span>';
  if (job.status === "completed") return "–";
  if (held) return `<span class="held">held: ${esc(held)}</span>`;
  return when(job.next_run_at);
}
// A lane's next due job, or what holds the lane: a server's named wait on the whole lane, or paused owners.
function laneNext(l) {
  if (l.quota_until) return `<span class="held">held: quota until ${when(l.quota_until)}</span>`;
  if (l.throttled_until) return `<span class="held">held: lane throttled until ${when(l.throttled_until)}</span>`;
  if (!l.next_due && l.held) return '<span class="held">held: owner paused</span>';
  return nextDue(l.next_due);
}
// The rate a lane keeps besides its declared one, as learnt from its API's answers.
function learntRate(l) {
  if (l.learnt_rate == null) return '<span class="muted">–</span>';
  const rate = l.learnt_rate >= 10 ? l.learnt_rate.toFixed(0) : l.learnt_rate.toPrecision(2);
  const from = l.learnt_from === "refusals" ? "cut by 429s, growing back" : "from its headers";
  return `${rate}/s <span class="muted">${from}</span>`;
}
// An error of a job waiting to retry is routine: said quietly, in grey.
function errorText(error, status) {
  return status === "failed" ? `<span class="muted">retrying: ${esc(error)}</span>` : `<span class="error-text">${esc(error)}</span>`;
}
function utcClock(date) { return `${date.toISOString().slice(11, 19)} UTC`; }
function windowText(start, end) { return start ? `${when(start).slice(0, 16)} → ${when(end).slice(0, 16)}` : "snapshot"; }
function number(n) { return Number(n ?? 0).toLocaleString("en-US"); }

async function api(path, options = {}) {
  const response = await fetch(path, {credentials: "same-origin", headers: {"Accept": "application/json", "Content-Type": "application/json"}, ...options});
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = {detail: text}; }
  if (!response.ok) {
    const detail = body && body.detail ? (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail)) : response.statusText;
    throw new Error(`${response.status}: ${detail}`);
  }
  return body;
}
function queuePath(rest) { return `api/queues/${encodeURIComponent(state.queue)}/${rest}`; }

function say(text, isError = false) {
  const box = $("#message");
  box.textContent = text;
  box.className = isError ? "error" : "";
  box.hidden = false;
}

// -- actions: one confirmation, one call, the server's own words about what changed ------------------------

// Airflow frames the page in a sandbox without allow-modals, where window.confirm and window.prompt answer
// "no" without asking: the page asks in a box of its own. Resolves to true (or the reason typed), or null.
// ``details``: HTML shown under the question (what the action will make), escaped by its maker.
function ask(question, reason = null, details = null) {
  const box = $("#confirm"), input = $("#confirm-input");
  $("#confirm-text").textContent = question;
  $("#confirm-details").innerHTML = details ?? "";
  $("#confirm-details").hidden = details === null;
  $("#confirm-reason").hidden = reason === null;
  input.value = reason ?? "";
  box.hidden = false;
  (reason === null ? $("#confirm-yes") : input).focus();
  return new Promise((resolve) => {
    const done = (answer) => { box.hidden = true; $("#confirm-yes").onclick = $("#confirm-no").onclick = null; resolve(answer); };
    $("#confirm-yes").onclick = () => done(reason === null ? true : (input.value.trim() || null));
    $("#confirm-no").onclick = () => done(null);
  });
}

async function act(what, question, body) {
  if (!(await ask(question))) return;
  try {
    const answer = await api(queuePath(what), {method: "POST", body: JSON.stringify(body)});
    say(answer.message);
  } catch (error) {
    say(`${what} refused: ${error.message}`, true);
  }
  await refresh();
}
const actions = {
  "requeue-job": (d) => act("requeue", `Requeue job #${d.job} (${d.owner}/${d.type})? It restarts from its cursor.`, {job_id: Number(d.job)}),
  "force-job": (d) => act("requeue", `Requeue job #${d.job} (${d.owner}/${d.type}) with force? It restarts from its cursor, and its snapshot deletes the rows it does not see, however many.`, {job_id: Number(d.job), force_deletions: true}),
  "requeue-owner": (d) => act("requeue", `Requeue every failed, deferred or abandoned job of ${d.owner}?`, {owner: d.owner}),
  "requeue-type": (d) => act("requeue", `Requeue the failed, deferred or abandoned ${d.type} jobs of ${d.owner}?`, {owner: d.owner, type: d.type}),
  "cancel-owner": async (d) => {
    const reason = await ask(`Cancel ${d.owner}'s work? Its waiting jobs are abandoned now, a running one after its current page; a requeue continues them from their cursors.`, "account disconnected");
    if (reason === null) return;
    try {
      say((await api(queuePath("cancel"), {method: "POST", body: JSON.stringify({owner: d.owner, reason})})).message);
    } catch (error) { say(`cancel refused: ${error.message}`, true); }
    await refresh();
  },
  "pause-owner": async (d) => {
    const reason = await ask(`Pause ${d.owner}? None of its jobs is taken (a running one stops after its current page) until it is resumed; its lane-mates run on.`, "token revoked");
    if (reason === null) return;
    try {
      say((await api(queuePath("pause"), {method: "POST", body: JSON.stringify({owner: d.owner, reason})})).message);
    } catch (error) { say(`pause refused: ${error.message}`, true); }
    await refresh();
  },
  "resume-owner": (d) => act("resume", `Resume ${d.owner}? Its jobs go on from their cursors, and what the pause skipped is planned now.`, {owner: d.owner}),
  "credentials-owner": (d) => openCredentials(d.owner),
  "plan-owner": (d) => act("plan", `Plan ${d.owner} now?`, {owner: d.owner}),
  "plan-queue": () => act("plan", `Plan every owner of ${state.queue} now?`, {}),
  "show-job": (d) => showJob(d.job),
  "cancel-resync": (d) => act(`resyncs/${encodeURIComponent(d.key)}/cancel`, `Cancel re-sync ${d.key}? Its waiting jobs are abandoned now, its running ones after their current page; what completed stays.`, {}),
  "requeue-resync": (d) => act(`resyncs/${encodeURIComponent(d.key)}/requeue`, `Requeue the failed jobs of re-sync ${d.key}? Each restarts from its cursor.`, {}),
};

// The credentials form, write-only: its values are sent once and cleared at once, whatever the answer; the
// page never has a value to show (the Owners view's JSON carries the state only). Who may not edit DAGs is
// refused by the server, as every other action is.
function openCredentials(owner) {
  const form = $("#credentials-form");
  form.reset();
  form.elements.owner.value = owner;
  $("#credentials-title").textContent = `Set the credentials of ${owner}: they replace any set before, and an owner that needs reconnecting is resumed.`;
  showCredentialFields(form);
  $("#credentials").hidden = false;
  form.elements.secret.focus();
}
function showCredentialFields(form) {
  const oauth = form.elements.kind.value === "oauth";
  $("#credentials-secret-label").textContent = oauth ? "Access token" : "API key";
  form.querySelectorAll("label.oauth").forEach((label) => { label.hidden = !oauth; });
}
function closeCredentials() {
  $("#credentials-form").reset();
  $("#credentials").hidden = true;
}
async function setCredentials(form) {
  const v = formValues(form), oauth = v.kind === "oauth";
  const body = oauth
    ? {owner: v.owner, kind: "oauth", access_token: v.secret ?? null, refresh_token: v.refresh_token ?? null,
       expires_in: v.expires_in ? Number(v.expires_in) * 60 : null}
    : {owner: v.owner, kind: "api_key", api_key: v.secret ?? null};
  closeCredentials();  // the values leave the page's fields before the request is even answered
  try {
    say((await api(queuePath("credentials"), {method: "POST", body: JSON.stringify(body)})).message);
  } catch (error) { say(`credentials of ${v.owner} refused: ${error.message}`, true); }
  await refresh();
}

// The Owners view's "Re-sync" form: one request for an owner (or every owner). Its days are ISO (YYYY-MM-DD) and
// UTC like every time on the page; the server cuts the windows (a dry run), the confirmation lists them, and a yes
// asks for that very request (its key), which makes exactly those.
async function askResync(form) {
  const v = formValues(form);
  let body;
  try {
    body = resyncBody(v);
  } catch (error) { say(`Re-sync not asked: ${error.message}`, true); return; }
  $("#message").hidden = true;  // an earlier refusal of the form's values is answered
  let preview;
  try {
    preview = await api(queuePath("resync"), {method: "POST", body: JSON.stringify({...body, dry_run: true})});
  } catch (error) { say(`re-sync refused: ${error.message}`, true); return; }
  const who = v.owner ? v.owner : "every owner";
  const windowed = preview.windows.some((g) => g.windows.length);
  const how = windowed ? "fetched again newest window first, after each lane's fresh work" : "each a snapshot taken again after its lane's fresh work";
  const question = `Re-sync ${v.type} of ${who} from ${v.start} to ${v.end} (UTC, the end excluded)? It makes ${preview.jobs === 1 ? "1 job" : `${number(preview.jobs)} jobs`}, ${how}; coverage and freshness do not move.`;
  if (!(await ask(question, null, resyncWindowsList(preview.windows)))) return;
  try {
    say((await api(queuePath("resync"), {method: "POST", body: JSON.stringify({...body, key: preview.key})})).message);
  } catch (error) { say(`re-sync refused: ${error.message}`, true); }
  await refresh();
}
// The request the form asks for, or an Error naming what is wrong with it.
function resyncBody(v) {
  if (!v.type) throw new Error("choose a type.");
  const start = isoDay(v.start, "From"), end = isoDay(v.end, "To");
  if (start >= end) throw new Error(`From (${v.start}) must be before To (${v.end}).`);
  if (!v.reason || !v.reason.trim()) throw new Error("say why (Reason).");
  return {type: v.type, start: `${v.start}T00:00:00+00:00`, end: `${v.end}T00:00:00+00:00`, reason: v.reason, owners: v.owner ? [v.owner] : null};
}
// A day of the calendar written YYYY-MM-DD, as the time of its midnight UTC; an Error naming the field and value.
function isoDay(text, field) {
  const parts = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text ?? "");
  const day = parts ? Date.UTC(Number(parts[1]), Number(parts[2]) - 1, Number(parts[3])) : NaN;
  if (Number.isNaN(day) || new Date(day).toISOString().slice(0, 10) !== text) {
    throw new Error(text ? `${field} "${text}" is not a day written YYYY-MM-DD (UTC), e.g. 2026-03-01.` : `${field} needs a day, YYYY-MM-DD (UTC).`);
  }
  return day;
}
// The windows a re-sync makes, by owners (those with the same windows together), as the dry run gave them.
const SHOWN_WINDOWS = 200;
function resyncWindowsList(groups) {
  let shown = 0, left = 0;
  const html = groups.map((g) => {
    const names = g.owners.length > 8 ? `${g.owners.slice(0, 8).join(", ")} … (${number(g.owners.length)} owners)` : g.owners.join(", ");
    const each = g.owners.length > 1 ? " each" : "";
    if (!g.windows.length) return `<p><b>${esc(names)}</b>: one snapshot${each}</p>`;
    const lines = g.windows.slice(0, Math.max(0, SHOWN_WINDOWS - shown));
    shown += lines.length; left += g.windows.length - lines.length;
    return `<p><b>${esc(names)}</b>: ${g.windows.length === 1 ? "1 window" : `${number(g.windows.length)} windows`}${each}</p>
      <ol class="windows">${lines.map(([a, b]) => `<li>${windowText(a, b)} UTC</li>`).join("")}</ol>`;
  }).join("");
  return html + (left ? `<p class="muted">… and ${number(left)} more windows (airflow synclane resync --dry-run lists them all).</p>` : "");
}
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-action]");
  if (!button) return;
  event.preventDefault();
  actions[button.dataset.action](button.dataset);
});
function button(action, label, data, danger = false) {
  const attributes = Object.entries(data).map(([k, v]) => `data-${k}="${esc(v)}"`).join(" ");
  return `<button data-action="${action}" ${attributes}${danger ? ' class="danger"' : ""}>${esc(label)}</button>`;
}

// -- the views ------------------------------------------------------------------------------------------------

function renderQueues(queues) {
  const order = ["pending", "running", "failed", "deferred", "abandoned", "completed"];
  return `<div class="cards">${queues.map((q) => `
    <div class="card" data-queue="${esc(q.queue)}">
      <h2>${esc(q.queue)}</h2>
      <div class="stats">
        ${order.map((s) => `<div class="stat ${s === "abandoned" && q.jobs[s] > 0 ? "bad" : ""}"><b>${number(q.jobs[s])}${q.more_than.includes(s) ? "+" : ""}</b>${s}</div>`).join("")}
        <div class="stat"><b>${number(q.done_last_hour)}</b>jobs done, last hour</div>
        <div class="stat"><b>${number(q.records_last_hour)}</b>records, last hour</div>
        <div class="stat" title="Work a pause holds (an owner paused, a lane throttled) is held, not overdue"><b>${age(q.oldest_waiting_age)}</b>oldest due job waiting</div>
        <div class="stat ${q.owners_paused ? "warn" : ""}"><b>${number(q.owners_paused)}</b>owners paused (their work held)</div>
      </div>
    </div>`).join("")}</div>`;
}

function renderLanes(page) {
  if (!page.items.length) return `<p class="muted">No lane has a job running or waiting.</p>`;
  return `<table id="lanes-table"><thead><tr><th>Lane</th><th>Running</th><th>Window</th><th>Cursor</th><th class="num">Records</th>
    <th>Heartbeat</th><th>Worker</th><th class="num">Waiting</th><th>Next due</th><th>Learnt rate</th><th>Last error</th></tr></thead><tbody>
    ${page.items.map((l) => {
      // A lane k wide runs up to k jobs: one row each, the lane's own cells spanning them.
      const running = l.running.length ? l.running : [null];
      const span = `rowspan="${running.length}"`;
      return running.map((r, i) => `<tr data-lane="${esc(l.lane)}"${r ? ` data-job="${r.id}"` : ""}>
        ${i === 0 ? `<td ${span}><b>${esc(l.lane)}</b></td>` : ""}
        <td>${r ? `${button("show-job", `#${r.id}`, {job: r.id})} ${esc(r.owner)}/${esc(r.type)} <span class="muted">${esc(r.mode)}, attempt ${r.attempt}${r.width > 1 ? `, slot ${r.slot + 1} of ${r.width}` : ""}</span>` : '<span class="muted">idle</span>'}</td>
        <td>${r ? windowText(r.window_start, r.window_end) : ""}</td>
        <td><code>${r ? esc(r.cursor ?? "start") : ""}</code></td>
        <td class="num">${r ? number(r.records) : ""}</td>
        <td>${r ? age(r.heartbeat_age) + " ago" : ""}</td>
        <td><code>${r ? esc(r.worker) : ""}</code></td>
        ${i === 0 ? `<td class="num" ${span}>${number(l.waiting)}${l.held ? ` <span class="muted">(${number(l.held)} held)</span>` : ""}</td>
        <td ${span}>${laneNext(l)}</td>
        <td ${span}>${learntRate(l)}</td>
        <td ${span}>${l.last_error ? `${errorText(l.last_error, l.error_status)} (${button("show-job", `#${l.error_job_id}`, {job: l.error_job_id})})` : ""}</td>` : ""}
      </tr>`).join("");
    }).join("")}</tbody></table>`;
}

function conditionText(o) {  // the one answer a person reads, with what makes it so
  if (o.condition === "paused" && o.paused_by === "credentials") {  // resumed when its credentials are set
    return `needs reconnecting <span class="muted">since ${when(o.paused_at)}</span><br><span class="error-text">${esc(o.paused_reason)}</span>`;
  }
  if (o.condition === "paused") {
    return `paused ${when(o.paused_at)} <span class="muted">by ${esc(o.paused_by)}</span><br><span class="error-text">${esc(o.paused_reason)}</span>`;
  }
  if (o.condition === "failing") return `failing <span class="muted">(${o.consecutive_failures} failed in a row)</span>`;
  if (o.condition === "degraded") {
    return `degraded <span class="muted">(${o.health === "degraded" ? `${o.consecutive_failures} failed in a row` : `${o.abandoned} abandoned`})</span>`;
  }
  if (o.condition === "behind") return `behind <span class="muted">(${age(o.lag)})</span>`;
  return "healthy";
}
// The credentials' state as the server words it: "not set", "set (…)…", or "needs reconnecting: …".
function credentialsClass(text) {
  return text.startsWith("needs reconnecting") ? "reconnect" : (text.startsWith("set") ? "set" : "unset");
}
function renderOwners(page) {
  if (!page.items.length) return `<p class="muted">No owner matches.</p>`;
  return `<table id="owners-table"><thead><tr><th>Owner</th><th title="The worst that holds: paused (nothing of it runs until it is resumed), failing, degraded (failed attempts in a row, or an abandoned job waiting for a person), behind (lagging more than the queue's max_lag), healthy">Condition</th><th title="The state of the owner's credentials, never a value: not set, set (and when an OAuth token expires and was refreshed), or needs reconnecting (new credentials resume the owner)">Credentials</th><th>Initial load</th><th class="num" title="Records its completed jobs stored, all its work: first load, recurring, re-sync, by hand (counted every plan interval)">Records stored</th><th title="The end of the newest completed window of the owner's stalest type (a snapshot: when it completed), that type named. The health check's lag looks at windowed types only.">Fresh until</th>
    <th>Lag</th><th class="num" title="Failed jobs waiting for their next attempt: routine until their attempts are spent">Retrying</th><th class="num" title="Jobs whose regular attempts are spent (one last attempt when the lane is idle) or abandoned (waiting for a person)">Deferred / abandoned</th><th>Last error</th><th>Actions</th></tr></thead><tbody>
    ${page.items.map((o) => {
      const pct = o.initial_total ? Math.round(100 * o.initial_completed / o.initial_total) : 0;
      const stuck = o.deferred + o.abandoned;
      const bad = ["failing", "degraded"].includes(o.condition);
      const paused = o.paused_at !== null;
      const routine = o.error_status === "failed" && !bad;  // a retry on its way: said quietly
      return `<tr data-owner="${esc(o.owner)}" data-condition="${esc(o.condition)}" class="${[bad ? "bad" : "", paused ? "paused" : ""].join(" ").trim()}">
        <td><b>${esc(o.owner)}</b></td>
        <td class="condition"><span class="condition ${esc(o.condition)}">${conditionText(o)}</span></td>
        <td class="credentials"><span class="credentials ${credentialsClass(o.credentials)}">${esc(o.credentials)}</span>
            ${button("credentials-owner", "Set…", {owner: o.owner})}</td>
        <td><span class="bar" title="${pct}%"><span style="width:${pct}%"></span></span>
            ${o.initial_completed}/${o.initial_total} ${o.initial_complete ? "✓" : ""}</td>
        <td class="num">${number(o.records)}</td>
        <td>${when(o.fresh_until)}${o.fresh_type ? ` <span class="muted">(${esc(o.fresh_type)})</span>` : ""}</td>
        <td>${age(o.lag)}</td>
        <td class="num muted">${o.retrying || ""}</td>
        <td class="num ${stuck ? "bad" : ""}">${stuck ? `${o.deferred} / ${o.abandoned}` : ""}</td>
        <td>${o.last_error ? `<span class="${routine ? "muted" : "error-text"}">${routine ? "retrying: " : ""}${esc(o.last_error)}</span> (${esc(o.error_type)} ${button("show-job", `#${o.error_job_id}`, {job: o.error_job_id})})` : ""}</td>
        <td>${paused ? button("resume-owner", "Resume", {owner: o.owner}) : button("pause-owner", "Pause", {owner: o.owner}, true)}
            ${button("plan-owner", "Plan now", {owner: o.owner})}
            ${stuck > 0 || bad ? button("requeue-owner", "Requeue owner", {owner: o.owner}) : ""}
            ${o.error_type && !routine ? button("requeue-type", `Requeue ${o.error_type}`, {owner: o.owner, type: o.error_type}) : ""}
            ${button("cancel-owner", "Cancel", {owner: o.owner}, true)}</td>
      </tr>`;
    }).join("")}</tbody></table>`;
}

function renderResyncs(requests) {
  if (!requests.length) return `<p class="muted">No re-sync has been asked for. Ask for one on the Owners view.</p>`;
  return `<table id="resyncs-table"><thead><tr><th>Request</th><th>Type</th><th>Range</th><th>Owners</th><th>Windows done</th>
    <th class="num">Running</th><th class="num">Retrying</th><th class="num">Failed</th><th class="num">Records</th><th>Asked</th><th>Why</th><th>Actions</th></tr></thead><tbody>
    ${requests.map((p) => {
      const r = p.request, pct = p.total ? Math.round(100 * p.done / p.total) : 0;
      const state = r.cancelled_at ? `<span class="status abandoned">cancelled</span> <span class="muted">by ${esc(r.cancelled_by ?? "?")}</span>` : (p.finished ? "✓" : "");
      return `<tr data-key="${esc(r.key)}" class="${p.stopped && !r.cancelled_at ? "bad" : ""}">
        <td><code>${esc(r.key)}</code></td><td>${esc(r.type)}</td><td>${windowText(r.window_start, r.window_end)}</td>
        <td>${r.owners ? esc(r.owners.join(", ")) : '<span class="muted">every owner</span>'}</td>
        <td class="progress"><span class="bar" title="${pct}%"><span style="width:${pct}%"></span></span> ${p.done}/${p.total} ${state}</td>
        <td class="num">${p.running}</td><td class="num muted">${p.retrying}</td><td class="num ${p.stopped ? "bad" : ""}">${p.stopped}</td><td class="num">${number(p.records)}</td>
        <td>${when(r.requested_at)} <span class="muted">by ${esc(r.requested_by ?? "?")}</span></td><td>${esc(r.reason)}</td>
        <td>${p.stopped && !r.cancelled_at ? button("requeue-resync", "Requeue failed", {key: r.key}) : ""}
            ${!r.cancelled_at && !p.finished ? button("cancel-resync", "Cancel", {key: r.key}, true) : ""}</td>
      </tr>`;
    }).join("")}</tbody></table>`;
}

const STOPPED = new Set(["failed", "deferred", "abandoned"]);
const REQUEUE = new Set(["deferred", "abandoned"]);  // offered on the row: a failed job retries by itself
const LANDED = ["inserted", "updated", "unchanged", "stale", "deleted"];
function landedText(j) {  // the job's rows landed, the counts that are not zero (as the CLI's jobs table)
  return LANDED.filter((k) => Number(j[`${k}_count`] ?? 0))
    .map((k) => `<span class="landed ${k}">${number(j[`${k}_count`])} ${k}</span>`).join(", ");
}
function renderJobs(page) {
  if (!page.items.length) return `<p class="muted">No job matches.</p>`;
  return `<table id="jobs-table"><thead><tr><th>Job</th><th>Owner</th><th>Type</th><th>Mode</th><th>Status</th><th>Window</th>
    <th>Cursor</th><th class="num">Records</th><th>Rows landed</th><th class="num">Attempts</th><th>Next run</th><th>Error</th><th></th></tr></thead><tbody>
    ${page.items.map((j) => `<tr data-job="${j.id}" data-status="${esc(j.status)}">
      <td>${button("show-job", `#${j.id}`, {job: j.id})}</td><td>${esc(j.owner)}</td><td>${esc(j.type)}</td><td>${esc(j.mode)}</td>
      <td><span class="status ${esc(j.status)}">${esc(j.status)}</span></td>
      <td>${windowText(j.window_start, j.window_end)}</td><td><code>${esc(j.cursor ?? "")}</code></td>
      <td class="num">${number(j.processed_count)}</td><td class="landed">${landedText(j)}</td><td class="num">${j.attempt_count}</td><td>${nextRun(j, page.held[j.id])}</td>
      <td>${j.error ? errorText(j.error, j.status) : ""}</td>
      <td>${REQUEUE.has(j.status) ? button("requeue-job", "Requeue", {job: j.id, owner: j.owner, type: j.type}) : ""}</td>
    </tr>`).join("")}</tbody></table>`;
}

async function showJob(id) {
  state.detail = id;
  if (state.view !== "jobs") switchView("jobs", false);
  const box = $("#job-detail");
  try {
    const job = await api(`api/jobs/${encodeURIComponent(id)}`);
    box.innerHTML = `<h3>Job #${job.id}</h3><table>${Object.entries(job).map(([k, v]) =>
      `<tr><th>${esc(k)}</th><td><code>${esc(v === null ? "null" : v)}</code></td></tr>`).join("")}</table>
      ${STOPPED.has(job.status) ? button("requeue-job", "Requeue this job", {job: job.id, owner: job.owner, type: job.type}) : ""}
      ${job.status === "abandoned" && (job.error || "").includes("force_deletions") ? button("force-job", "Requeue with force_deletions", {job: job.id, owner: job.owner, type: job.type}) : ""}`;
    box.hidden = false;
  } catch (error) { say(`job #${id}: ${error.message}`, true); }
}

// -- loading and refreshing -----------------------------------------------------------------------------------

async function load() {
  const section = $(`#view-${state.view}`);
  const target = $(".content", section) || section;
  let html, next = null;
  if (state.view === "queues") {
    html = renderQueues(state.queues);
  } else if (state.view === "lanes") {
    const page = await api(queuePath("lanes?" + new URLSearchParams(state.cursor ? {after: state.cursor} : {})));
    html = renderLanes(page); next = page.next;
  } else if (state.view === "owners") {
    const query = {...state.ownerFilters, ...(state.cursor ? {after: state.cursor} : {})};
    const page = await api(queuePath("owners?" + new URLSearchParams(query)));
    html = renderOwners(page); next = page.next;
  } else if (state.view === "resyncs") {
    html = renderResyncs(await api(queuePath("resyncs")));
  } else {
    const query = {...state.jobFilters, ...(state.cursor ? {before: state.cursor} : {})};
    const page = await api(queuePath("jobs?" + new URLSearchParams(query)));
    html = renderJobs(page); next = page.next;
  }
  target.innerHTML = html;
  state.next = next;
  $("#pager").hidden = state.view === "queues" || state.view === "resyncs";
  $("#next-page").disabled = !next;
  $("#first-page").disabled = !state.cursor;
}

async function refresh() {
  try {
    state.queues = await api("api/queues");
    const select = $("#queue");
    if (!select.options.length) {
      select.innerHTML = state.queues.map((q) => `<option>${esc(q.queue)}</option>`).join("");
      state.queue = state.queues.length ? state.queues[0].queue : null;
      const types = $("#job-filters select[name=type]");
      const current = state.queues[0];
      if (current) types.innerHTML += current.types.map((t) => `<option>${esc(t)}</option>`).join("");
      if (current) $("#resync-form select[name=type]").innerHTML += current.types.map((t) => `<option>${esc(t)}</option>`).join("");
    }
    if (state.queue) await load();
    if (state.detail && state.view === "jobs") await showJob(state.detail);
    $("#updated").textContent = `updated ${utcClock(new Date())}`;
  } catch (error) {
    say(`Could not load: ${error.message}`, true);
  }
}

function switchView(view, reload = true) {
  state.view = view; state.cursor = null; state.next = null;
  if (view !== "jobs") { state.detail = null; $("#job-detail").hidden = true; }
  document.querySelectorAll("#views button").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
  document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== `view-${view}`; });
  if (reload) refresh();
}

function formValues(form) {
  const values = {};
  for (const [k, v] of new FormData(form).entries()) if (v) values[k] = v === "on" ? "true" : v;
  return values;
}

document.querySelectorAll("#views button").forEach((b) => b.addEventListener("click", () => switchView(b.dataset.view)));
$("#queue").addEventListener("change", (e) => { state.queue = e.target.value; switchView(state.view); });
$("#owner-filters").addEventListener("submit", (e) => { e.preventDefault(); state.ownerFilters = formValues(e.target); state.cursor = null; refresh(); });
$("#job-filters").addEventListener("submit", (e) => { e.preventDefault(); state.jobFilters = formValues(e.target); state.cursor = null; state.detail = null; $("#job-detail").hidden = true; refresh(); });
$("#resync-form").addEventListener("submit", (e) => { e.preventDefault(); askResync(e.target); });
$("#credentials-form").addEventListener("submit", (e) => { e.preventDefault(); setCredentials(e.target); });
$("#credentials-form").elements.kind.addEventListener("change", (e) => showCredentialFields(e.target.form));
$("#credentials-back").addEventListener("click", closeCredentials);
$("#plan-queue").addEventListener("click", () => actions["plan-queue"]());
$("#next-page").addEventListener("click", () => { if (state.next) { state.cursor = state.next; refresh(); } });
$("#first-page").addEventListener("click", () => { state.cursor = null; refresh(); });

// ?view= opens a view; the tab on a DAG's page (?dag=…, the worker DAG's) opens on the lanes it works.
const initial = state.params.get("view") || (state.params.get("dag") ? "lanes" : null);
if (initial && ["queues", "lanes", "owners", "jobs", "resyncs"].includes(initial)) switchView(initial, false);
refresh();
setInterval(refresh, REFRESH_MS);
