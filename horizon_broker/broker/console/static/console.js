// The console's own script: a group of the timeline shows its segments when clicked, and pages
// of live state re-read their #live part every data-refresh-s seconds (no reload, no library).
"use strict";

function showGroup(event) {
  const rect = event.target.closest("rect.group");
  if (!rect) return;
  document.querySelectorAll("rect.group.selected").forEach((r) => r.classList.remove("selected"));
  rect.classList.add("selected");
  const detail = document.getElementById("segment-detail");
  if (detail) {
    detail.textContent = rect.dataset.state + " group, " + rect.dataset.segments +
      " segment(s):\n" + rect.dataset.detail;
  }
}

// Every request the script makes carries the page's CSRF token (POSTs without it are refused).
function csrfToken() {
  const meta = document.querySelector("meta[name=csrf-token]");
  return meta ? meta.content : "";
}

async function refreshLive() {
  const live = document.getElementById("live");
  if (!live) return;
  try {
    const answer = await fetch(window.location.href, {
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrfToken() },
    });
    if (!answer.ok) return;
    const page = new DOMParser().parseFromString(await answer.text(), "text/html");
    const fresh = page.getElementById("live");
    if (fresh) live.replaceChildren(...fresh.childNodes);
  } catch (error) {
    // The broker is away for a moment: keep what is shown, try again at the next tick.
  }
}

document.addEventListener("click", showGroup);
const refreshSeconds = Number(document.body.dataset.refreshS || "0");
if (refreshSeconds > 0 && document.getElementById("live")) {
  setInterval(refreshLive, refreshSeconds * 1000);
}
