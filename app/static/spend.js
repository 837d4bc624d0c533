// The Spend page's chart by day: uPlot bars of dollars over the month's days,
// from the JSON the page carries. The table beside it is the same numbers.
(function () {
  const figure = document.getElementById("by-day-chart");
  if (!figure || !window.uPlot) return;
  const days = JSON.parse(document.getElementById("by-day-data").textContent);
  if (!days.length) return;
  const x = days.map(([day]) => Date.parse(day + "T00:00:00Z") / 1000);
  // Days with nothing spent get no bar (a zero bar is drawn as a dash).
  const dollars = days.map(([, micros]) => (micros ? micros / 1e6 : null));
  const halfDay = 12 * 3600;
  new uPlot({
    width: Math.min(figure.clientWidth || 800, 1000), height: 220,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),     // days are UTC days
    series: [{ label: "day", value: "{YYYY}-{MM}-{DD}" },
             { label: "spent", stroke: "#3451b2", fill: "rgba(52, 81, 178, 0.35)",
               paths: uPlot.paths.bars({ size: [0.7, 40] }), points: { show: false },
               value: (u, v, _, i) => (i == null ? "-" : "$" + (v || 0).toFixed(2)) }],
    axes: [{}, { values: (u, ticks) => ticks.map((v) => "$" + v.toFixed(v < 10 ? 2 : 0)) }],
    scales: { x: { time: true, range: () => [x[0] - halfDay, x[x.length - 1] + halfDay] },
              y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
  }, [x, dollars], figure);
})();
