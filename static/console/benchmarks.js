// The model page's benchmark charts: each compared revision's figures by concurrency level,
// from the JSON the page carries (jobs/benchmark/shown.py chart()), drawn with Plotly (served
// from the plotly package, loaded before this script by the traffic charts). Drawn again when
// the live socket swaps in new results (jobs/_benchmark_results.html): a run started or ended.
(() => {
  "use strict";
  const config = { displayModeBar: false, responsive: true };
  const layout = {
    margin: { l: 48, r: 12, t: 8, b: 40 }, height: 220, showlegend: true,
    legend: { orientation: "h", y: -0.3 },
    xaxis: { type: "category" },  // the captions say "by concurrency"
    yaxis: { rangemode: "tozero" },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
  };
  let drawn = null;  // the data element last drawn: a message that swapped nothing draws nothing

  function draw() {
    const holder = document.getElementById("benchmark-chart-data");
    const section = document.querySelector("[data-benchmarks]");
    if (!holder || !section || !window.Plotly || holder === drawn) return;
    let series = [];
    try { series = JSON.parse(holder.textContent); } catch (error) { return; }
    drawn = holder;
    if (!series.length) return;
    const chat = series[series.length - 1].task === "chat";
    const traces = (field) => series.map((s) => ({
      x: s.concurrency.map(String), y: s[field], name: `revision ${s.revision}`,
      type: "scatter", mode: "lines+markers",
    }));
    const charts = {};
    section.querySelectorAll("[data-benchmark-chart]").forEach((el) => { charts[el.dataset.benchmarkChart] = el; });
    Plotly.react(charts.throughput, traces(chat ? "outputTokensPerSecond" : "requestsPerSecond"), layout, config);
    Plotly.react(charts.latency, traces(chat ? "ttftP95" : "latencyP95"), layout, config);
    section.dataset.benchmarkSeries = String(series.length);
  }

  draw();
  document.addEventListener("htmx:wsAfterMessage", draw);
})();
