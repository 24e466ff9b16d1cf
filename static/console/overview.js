// The model overview. Its log and revision-diff fragments answer 400 (a bad parameter) and 503
// (the cluster did not answer) with the reason, which htmx would not swap in: parts marked
// data-swap-errors show it in place.
//
// Its charts: reads the chart data endpoint for the window picked (1 hour,
// 24 hours, 7 days) and draws it with Plotly (served from the plotly package, never a CDN).
// Live points arrive as the DOM event `servedeck:chart-points` with detail {points: [...]}, in
// the shape jobs/usage/charts.py documents: a point whose "t" is already drawn replaces it, a newer
// one is appended; in the longer windows (whose buckets hold many minutes, and percentiles
// do not add up) a point makes the page read the window again, at most every 15 s.
(() => {
  "use strict";
  document.addEventListener("htmx:beforeSwap", (event) => {
    const status = event.detail.xhr.status;
    if (status !== 400 && status !== 503) return;
    if (!event.detail.target || !event.detail.target.closest("[data-swap-errors]")) return;
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  });

  // The socket's traffic message carries the newest points (jobs/_chart_points.html); each
  // message's points are handed to the charts once.
  document.addEventListener("htmx:wsAfterMessage", () => {
    const holder = document.getElementById("live-chart-points");
    if (!holder || !holder.dataset.points) return;
    let points = [];
    try { points = JSON.parse(holder.dataset.points); } catch (error) { return; }
    holder.dataset.points = "";
    if (points.length) {
      document.dispatchEvent(new CustomEvent("servedeck:chart-points", { detail: { points } }));
    }
  });

  const section = document.querySelector("[data-charts]");
  if (!section || !window.Plotly) return;
  const url = section.dataset.chartsUrl;
  const status = section.querySelector("[data-chart-status]");
  const charts = {};
  section.querySelectorAll("[data-chart]").forEach((el) => { charts[el.dataset.chart] = el; });
  const config = { displayModeBar: false, responsive: true, staticPlot: false };
  const layout = (extra) => Object.assign({
    margin: { l: 48, r: 12, t: 8, b: 32 }, height: 220, showlegend: true,
    legend: { orientation: "h", y: -0.25 }, xaxis: { type: "date" }, yaxis: { rangemode: "tozero" },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
  }, extra || {});
  let data = null;
  let windowName = "1h";
  let refetchAt = 0;
  let refetchTimer = null;

  function draw() {
    const pts = data.points;
    const t = pts.map((p) => p.t);
    const col = (name) => pts.map((p) => p[name]);
    Plotly.react(charts.requests, [
      { x: t, y: col("s2xx"), name: "2xx", type: "bar", marker: { color: "#3c9d5d" } },
      { x: t, y: col("s4xx"), name: "4xx", type: "bar", marker: { color: "#d9a520" } },
      { x: t, y: col("s5xx"), name: "5xx", type: "bar", marker: { color: "#d64545" } },
    ], layout({ barmode: "stack" }), config);
    Plotly.react(charts.latency, [
      { x: t, y: col("p50"), name: "p50", type: "scatter", mode: "lines+markers", marker: { size: 4 } },
      { x: t, y: col("p95"), name: "p95", type: "scatter", mode: "lines+markers", marker: { size: 4 } },
    ], layout(), config);
    Plotly.react(charts.tokens, [
      { x: t, y: col("tokensPerSecond"), name: "tokens/s", type: "scatter", mode: "lines", fill: "tozeroy" },
    ], layout({ showlegend: false }), config);
    // Usage per API key: only an admin's page has the chart and gets the figures.
    const keys = data.keys;
    if (charts.keys && keys) Plotly.react(charts.keys, [
      { x: keys.map((k) => k.key), y: keys.map((k) => k.requests), name: "requests", type: "bar", offsetgroup: 1 },
      { x: keys.map((k) => k.key), y: keys.map((k) => k.tokens), name: "tokens", type: "bar", yaxis: "y2", offsetgroup: 2 },
    ], layout({ xaxis: { type: "category" }, barmode: "group", margin: { l: 48, r: 56, t: 8, b: 32 },
      yaxis2: { overlaying: "y", side: "right", rangemode: "tozero" } }), config);
    const total = pts.reduce((sum, p) => sum + p.requests, 0);
    status.textContent = `${total} requests over the last ${section.querySelector(`[data-chart-window="${windowName}"]`).textContent}.`;
    section.dataset.chartPoints = String(pts.length);
    section.dataset.chartRequests = String(total);
  }

  function load() {
    refetchAt = Date.now();
    return fetch(`${url}?window=${encodeURIComponent(windowName)}`, {
      credentials: "same-origin", headers: { Accept: "application/json" },
    }).then((response) => response.json().then((body) => {
      if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
      data = body;
      draw();
    })).catch((error) => { status.textContent = `The charts could not be read: ${error.message}`; });
  }

  function refetchSoon() {
    if (refetchTimer) return;
    const wait = Math.max(0, refetchAt + 15000 - Date.now());
    refetchTimer = setTimeout(() => { refetchTimer = null; load(); }, wait);
  }

  document.addEventListener("servedeck:chart-points", (event) => {
    const points = (event.detail && event.detail.points) || [];
    if (!data || !points.length) return;
    if (data.window !== "1h") { refetchSoon(); return; }
    for (const point of points) {
      const at = data.points.findIndex((p) => p.t === point.t);
      if (at >= 0) data.points[at] = point;
      else if (point.t > data.points[data.points.length - 1].t) {
        data.points.push(point);
        data.points.shift();  // the window keeps its length
      }
    }
    draw();
  });

  section.addEventListener("click", (event) => {
    const button = event.target.closest("[data-chart-window]");
    if (!button) return;
    windowName = button.dataset.chartWindow;
    section.querySelectorAll("[data-chart-window]").forEach((b) => {
      b.setAttribute("aria-pressed", b === button ? "true" : "false");
    });
    load();
  });
  load();
})();
