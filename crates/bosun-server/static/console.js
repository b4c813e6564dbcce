// Bosun console: small enhancements over pages that work without JavaScript.
"use strict";
(function () {
  // Switching org keeps you on the same kind of page.
  document.addEventListener("change", function (e) {
    var t = e.target;
    if (t && t.matches && t.matches("[data-org-switch]")) {
      var rest = location.pathname.replace(/^\/orgs\/[^/]+/, "").split("/").slice(0, 2).join("/") || "/stacks";
      location.href = "/orgs/" + encodeURIComponent(t.value) + rest;
    }
  });

  // Live logs: <pre data-live-log="URL of the SSE stream" data-after="last seq">.
  // Appends each chunk as it arrives; on the run's end, reloads the parts of the page
  // marked data-refresh so the state, phases and buttons follow.
  function followLog(pre) {
    var url = pre.getAttribute("data-live-log");
    var after = pre.getAttribute("data-after");
    if (after) { url += (url.indexOf("?") < 0 ? "?" : "&") + "after=" + encodeURIComponent(after); }
    var status = document.querySelector("[data-live-status]");
    var es = new EventSource(url);
    if (status) { status.textContent = "following live"; }
    es.addEventListener("chunk", function (ev) {
      var c = JSON.parse(ev.data);
      var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      appendChunk(pre, c);
      pre.setAttribute("data-after", String(c.seq));
      if (atBottom) { pre.scrollTop = pre.scrollHeight; }
    });
    es.addEventListener("end", function (ev) {
      es.close();
      var s = JSON.parse(ev.data).state;
      if (status) { status.textContent = "ended: " + s; }
      refresh();
    });
    es.onerror = function () { if (status) { status.textContent = "reconnecting…"; } };
  }

  // One chunk ({seq, text, at, phase}) added to a log as the page renders it: a divider
  // where the phase changes, and each line that starts here led by its time (UTC).
  function appendChunk(pre, c) {
    if (c.phase && pre.getAttribute("data-phase") !== c.phase) {
      var d = document.createElement("span");
      d.className = "log-phase";
      d.setAttribute("role", "separator");
      d.textContent = c.phase;
      pre.appendChild(d);
      pre.setAttribute("data-phase", c.phase);
    }
    var mid = pre.getAttribute("data-mid") === "1";
    var lines = c.text.match(/[^\n]*\n|[^\n]+$/g) || [];
    lines.forEach(function (line) {
      if (!mid && c.at) {
        var t = document.createElement("time");
        t.className = "log-t";
        t.setAttribute("datetime", c.at);
        t.textContent = c.at.substr(11, 8);
        pre.appendChild(t);
      }
      pre.appendChild(document.createTextNode(line));
      mid = line.charAt(line.length - 1) !== "\n";
    });
    pre.setAttribute("data-mid", mid ? "1" : "0");
  }

  // Replaces every [data-refresh] element with the same element from a fresh copy of
  // this page (htmx-style partial update without a framework).
  function refresh() {
    var parts = document.querySelectorAll("[data-refresh]");
    if (!parts.length) { return; }
    fetch(location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      parts.forEach(function (el) {
        var fresh = doc.getElementById(el.id);
        if (fresh) { el.replaceWith(fresh); }
      });
    });
  }

  // Parts marked data-poll="seconds" refresh on their own while the page is open, until
  // a refresh brings none back (what they waited for has ended).
  function poll(el) {
    var secs = parseInt(el.getAttribute("data-poll"), 10) || 5;
    var timer = setInterval(function () {
      if (!document.querySelector("[data-poll]")) { clearInterval(timer); return; }
      if (!document.hidden) { refresh(); }
    }, secs * 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live-log]").forEach(followLog);
    var p = document.querySelector("[data-poll]");
    if (p) { poll(p); }
  });
})();
