// Every HTMX request carries the page's CSRF token.
document.addEventListener("htmx:configRequest", (event) => {
  const meta = document.querySelector('meta[name="csrf-token"]');
  if (meta) event.detail.headers["X-CSRFToken"] = meta.content;
});

// The log box follows new output while the reader is at its end, and stays
// on the same lines when earlier output is put above them.
const logBox = () => document.getElementById("log");
document.addEventListener("DOMContentLoaded", () => {
  const log = logBox();
  if (log) log.scrollTop = log.scrollHeight;
});
let logBefore = null;
document.addEventListener("htmx:oobBeforeSwap", (event) => {
  const log = logBox();
  if (!log || event.detail.target !== log) return;
  logBefore = { first: log.firstChild, height: log.scrollHeight, top: log.scrollTop,
                atEnd: log.scrollHeight - log.scrollTop - log.clientHeight < 8 };
});
document.addEventListener("htmx:oobAfterSwap", (event) => {
  const log = logBox();
  if (!log || event.detail.target !== log || !logBefore) return;
  if (log.firstChild !== logBefore.first) {
    log.scrollTop = logBefore.top + (log.scrollHeight - logBefore.height);
  } else if (logBefore.atEnd) {
    log.scrollTop = log.scrollHeight;
  }
  logBefore = null;
});
