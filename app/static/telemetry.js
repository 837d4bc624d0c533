// Draws each chart of the Telemetry tab with uPlot, and while the run is
// live refetches the data every 2 s and updates the charts in place.
(function () {
  const root = document.getElementById("charts");
  if (!root || !window.uPlot) return;
  const palette = ["#3451b2", "#c62828", "#1a7f37", "#9a6700", "#6639ba", "#0a7ea4"];
  const plots = [];
  // Tick labels with the digits the spacing needs: uPlot's own keep three
  // decimals, so a learning rate of 3e-4 sat between ticks "0.001, 0, 0".
  function tickText(value, incr) {
    if (value === 0) return "0";
    if (incr < 1e-3 || Math.abs(value) >= 1e7) {
      const digits = Math.floor(Math.log10(Math.abs(value))) - Math.floor(Math.log10(incr));
      return value.toExponential(Math.min(6, Math.max(0, digits)));
    }
    return value.toFixed(Math.max(0, Math.min(6, -Math.floor(Math.log10(incr) + 1e-9))));
  }
  // The y axis's labels, also as the figure's aria-label: a canvas says
  // nothing to a screen reader.
  function yTicks(figure, title) {
    return (u, splits, axis, space, incr) => {
      const labels = splits.map((v) => (v == null ? "" : tickText(v, incr)));
      figure.setAttribute("aria-label", `${title}; y axis: ${labels.join(", ")}`);
      return labels;
    };
  }
  function draw(charts) {
    charts.forEach((chart, i) => {
      const figure = root.querySelector(`figure[data-index="${i}"]`);
      if (!figure) return;
      if (plots[i]) { plots[i].setData(chart.data); return; }
      const series = [{ label: chart.x }].concat(chart.metrics.map((m, k) => (
        { label: m, stroke: palette[k % palette.length], width: 2, spanGaps: true })));
      // An x of whole numbers (steps, epochs) gets whole-number ticks only.
      const whole = chart.data[0].every(Number.isInteger);
      const xAxis = { label: chart.x };
      if (whole) {
        xAxis.incrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1e6];
      }
      plots[i] = new uPlot({ width: Math.min(root.clientWidth, 1000), height: 260, series,
                             axes: [xAxis, { label: chart.metrics.join(", "), size: 70,
                                             values: yTicks(figure, chart.title) }],
                             scales: { x: { time: false } } }, chart.data, figure);
    });
  }
  draw(JSON.parse(document.getElementById("chart-data").textContent));
  if (root.dataset.live !== "yes") return;
  // The next ask 2 s after an answer, never before it: a slow answer never
  // has others pile up behind it.
  async function refresh() {
    try {
      const answer = await fetch(root.dataset.source, { credentials: "same-origin" });
      if (answer.ok) {
        const body = await answer.json();
        if (body.charts.length !== plots.length) { location.reload(); return; }
        draw(body.charts);
        if (!body.live) return;
      }
    } catch (e) { /* the server away a moment: ask again */ }
    setTimeout(refresh, 2000);
  }
  setTimeout(refresh, 2000);
})();
