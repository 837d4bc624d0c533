// A shell run's terminal in its page: xterm.js on the run's WebSocket
// (/runs/<name>/terminal, this site's own, with the session's cookie).
// Binary messages are the terminal's bytes; text ones resize it, or say how
// the shell ended. The box's data-state says where it is (tests read it).
(function () {
  "use strict";
  const box = document.getElementById("terminal");
  if (!box) return;
  const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  // The page's own host and scheme, whatever the server named.
  const address = new URL(box.dataset.socket, location.href);
  address.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  address.host = location.host;
  const encoder = new TextEncoder();
  let socket = null;
  let tries = 0;
  const open = () => socket !== null && socket.readyState === WebSocket.OPEN;
  const resize = () => open() && socket.send(JSON.stringify({ resize: [term.rows, term.cols] }));
  // A shell that has just started may not listen yet: asked again each second, for a while.
  const connect = () => {
    box.dataset.state = "connecting";
    socket = new WebSocket(address.href);
    socket.binaryType = "arraybuffer";
    let opened = false;
    socket.onopen = () => { opened = true; box.dataset.state = "open"; resize(); term.focus(); };
    socket.onmessage = (event) => {
      if (typeof event.data !== "string") { term.write(new Uint8Array(event.data)); return; }
      const message = JSON.parse(event.data);
      if ("exit" in message) {
        box.dataset.state = "ended";
        term.write("\r\n[the shell ended with exit code " + message.exit + "]\r\n");
      }
    };
    socket.onclose = () => {
      if (box.dataset.state === "ended") return;
      if (!opened && ++tries < 30) { setTimeout(connect, 1000); return; }
      box.dataset.state = "closed";
      term.write("\r\n[disconnected: reload the page to attach again]\r\n");
    };
  };
  connect();
  term.onData((data) => open() && socket.send(encoder.encode(data)));
  term.onResize(resize);
  window.addEventListener("resize", () => fit.fit());
})();
