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

// Times come in UTC with their exact moment in <time datetime>; in the
// reader's own time zone here, as `div ls` prints them, the exact moment
// (with its zone, and in UTC) on hover.
const pad = (n) => String(n).padStart(2, "0");
function localTimes(root) {
  root.querySelectorAll("time[datetime]").forEach((el) => {
    const moment = new Date(el.getAttribute("datetime"));
    if (Number.isNaN(moment.getTime()) || el.dataset.local) return;
    el.dataset.local = "yes";
    el.textContent = `${moment.getFullYear()}-${pad(moment.getMonth() + 1)}-${pad(moment.getDate())} ` +
                     `${pad(moment.getHours())}:${pad(moment.getMinutes())}`;
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    el.title = `${el.textContent}:${pad(moment.getSeconds())} ${zone} (${el.getAttribute("datetime")})`;
  });
}
document.addEventListener("DOMContentLoaded", () => localTimes(document));
document.addEventListener("htmx:load", (event) => localTimes(event.target));

// Copy buttons (hidden without JavaScript, where the text is selectable):
// the text of the element their data-copy names, to the clipboard.
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("button.copy[data-copy]").forEach((button) => {
    button.hidden = !navigator.clipboard;
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      await navigator.clipboard.writeText(source.textContent);
      button.textContent = "Copied";
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    });
  });
});
