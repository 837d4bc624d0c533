// The Spend page's chart by day: uPlot bars of dollars over the month's days,
// from the JSON the page carries. The table beside it is the same numbers.
(function () {
  const figure = document.getElementById("by-day-chart");
  if (!figure || !window.uPlot) return;
  const days = JSON.parse(document.getElementById("by-day-data").textContent);
  if (!days.length) return;
  const DAY = 86400;
  const x = days.map(([day]) => Date.parse(day + "T00:00:00Z") / 1000);
  // Days with nothing spent get no bar (a zero bar is drawn as a dash).
  const dollars = days.map(([, micros]) => (micros ? micros / 1e6 : null));
  const money = (v) => "$" + v.toFixed(2);
  new uPlot({
    width: Math.min(figure.clientWidth || 800, 1000), height: 240,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),     // days are UTC days
    series: [{ label: "day", value: "{YYYY}-{MM}-{DD}" },
             { label: "spent", stroke: "#3451b2", fill: "rgba(52, 81, 178, 0.35)",
               paths: uPlot.paths.bars({ size: [0.7, 40] }), points: { show: false },
               value: (u, v, _, i) => (i == null ? "-" : money(v || 0)) }],
    axes: [
      // Whole days only (never hours), as many as fit: every day, 2nd, week.
      { label: "Day (UTC)", incrs: [DAY, 2 * DAY, 7 * DAY], space: 44,
        values: (u, ticks) => ticks.map((t) => new Date(t * 1000).toISOString().slice(5, 10)) },
      // One format for every label: cents, so $0.50 and $10.00 read alike.
      { label: "Spent (USD)", size: 64, values: (u, ticks) => ticks.map(money) },
    ],
    scales: { x: { time: true, range: () => [x[0] - DAY / 2, x[x.length - 1] + DAY / 2] },
              y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
  }, [x, dollars], figure);
})();
