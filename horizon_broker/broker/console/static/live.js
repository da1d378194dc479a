// The live table: the page's subscription (server-sent events from /live/events), each message
// applied to the table shown. A delta's rows carry their change kind first: delete and
// update_before take a row out (by the result's key, or as a whole row when it has none),
// insert and update_after put one in; the rows a delta touched flash for a moment.
"use strict";

const FLASH_MS = 2000;
const section = document.getElementById("live-table");
const live = {
  columns: [],
  key: [],
  firstParts: [],
  source: null,
  token: "",
  ended: false,
};

function byId(id) {
  return document.getElementById(id);
}

function setStatus(state, text) {
  const status = byId("live-status");
  status.dataset.state = state;
  status.textContent = text;
}

// A row's key as text: its key columns' cells (every cell when the message has no key: a
// delta matched by whole rows, when the key is not unique in an answer).
function keyOf(cells, key) {
  if (!key.length) return JSON.stringify(cells);
  return JSON.stringify(key.map((name) => cells[live.columns.indexOf(name)]));
}

function rowElement(cells) {
  const tr = document.createElement("tr");
  tr.dataset.key = keyOf(cells, live.key);
  tr.cells_ = cells;
  for (const value of cells) {
    const td = document.createElement("td");
    td.textContent = value === null ? "NULL" : value;
    tr.appendChild(td);
  }
  return tr;
}

function flash(tr, kind) {
  tr.dataset.change = kind;
  tr.classList.add("flash-" + kind);
  setTimeout(() => tr.classList.remove("flash-" + kind), FLASH_MS);
}

function showTable(columns, rows) {
  live.columns = columns;
  const head = section.querySelector("#live-rows thead tr");
  head.replaceChildren(...columns.map((name) => {
    const th = document.createElement("th");
    th.textContent = name;
    return th;
  }));
  const body = section.querySelector("#live-rows tbody");
  body.replaceChildren();
  for (const cells of rows) add(cells, null);
}

function add(cells, before) {
  const tr = rowElement(cells);
  const body = section.querySelector("#live-rows tbody");
  body.insertBefore(tr, before && before.isConnected ? before : null);
  return tr;
}

// Take the row a delete or update_before names out; where it stood (for its update_after).
function take(cells, key) {
  const wanted = keyOf(cells, key);
  const rows = section.querySelectorAll("#live-rows tbody tr");
  const tr = Array.from(rows).find((row) => keyOf(row.cells_, key) === wanted);
  if (!tr) return null;
  const next = tr.nextSibling;
  tr.remove();
  return next;
}

function applyDelta(message) {
  const counts = { insert: 0, update: 0, delete: 0 };
  const deleted = [];
  let place = null;
  for (const row of message.rows) {
    const kind = row[0];
    const cells = row.slice(1);
    if (kind === "delete" || kind === "update_before") {
      place = take(cells, message.key);
      if (kind === "delete") {
        counts.delete += 1;
        deleted.push(keyOf(cells, message.key));
      }
    } else {
      const changed = kind === "insert" ? "insert" : "update";
      flash(add(cells, kind === "update_after" ? place : null), changed);
      counts[changed] += 1;
      place = null;
    }
  }
  const item = document.createElement("li");
  item.className = counts.delete ? "deleted" : "";
  item.textContent = message.from_snapshot + " → " + message.to_snapshot + ": " +
    counts.insert + " inserted, " + counts.update + " updated, " + counts.delete + " deleted" +
    (deleted.length ? " (" + deleted.join(", ") + ")" : "");
  byId("live-changes").prepend(item);
}

function onMessage(event) {
  const message = JSON.parse(event.data);
  if (message.kind === "first_result") {
    live.key = message.key;
    live.firstParts.push(...message.rows);
    if (message.last_part) {
      showTable(message.columns, live.firstParts);
      live.firstParts = [];
    }
  } else if (message.kind === "delta") {
    applyDelta(message);
  }
  if (message.strategy) byId("live-strategy").textContent = message.strategy;
  if (message.last_part) {
    byId("live-snapshot").textContent = message.to_snapshot;
    byId("live-token").textContent = message.resume_token;
    live.token = message.resume_token;
    setStatus("live", "live");
  }
  const count = section.querySelectorAll("#live-rows tbody tr").length;
  byId("live-count").textContent = String(count);
}

function onFailure(event) {
  const failure = JSON.parse(event.data);
  const shown = byId("live-error");
  shown.dataset.code = failure.code;
  shown.textContent = failure.code + ": " + failure.message;
  shown.hidden = false;
  stop("failed", "ended: " + failure.code);
}

function stop(state, text) {
  live.ended = true;
  if (live.source) live.source.close();
  setStatus(state, text);
  byId("live-resume").hidden = !live.token;
}

function connect(resumeToken) {
  let url = section.dataset.events;
  if (resumeToken) url += "&resume_token=" + encodeURIComponent(resumeToken);
  live.ended = false;
  byId("live-error").hidden = true;
  byId("live-resume").hidden = true;
  const source = new EventSource(url);
  live.source = source;
  source.addEventListener("message", onMessage);
  source.addEventListener("failure", onFailure);
  source.addEventListener("end", () => stop("ended", "ended"));
  // The connection went (the broker is away): no silent restart from a new first result, the
  // page offers to go on from its last token instead.
  source.onerror = () => {
    if (!live.ended) stop("disconnected", "disconnected");
  };
}

if (section) {
  byId("live-resume").addEventListener("click", () => connect(live.token));
  connect("");
}
