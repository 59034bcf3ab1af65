// Sluice console: live charts (uPlot) over /console/api/series, and a
// periodic refresh of the server-rendered tables. No inline script is
// allowed by the page's CSP; every value shown comes in through
// textContent or uPlot's canvas, never innerHTML of untrusted text.
(function () {
  "use strict";

  var root = document.documentElement;
  var prefix = "/console/";

  // What each kind of series draws: charts, each with its columns.
  var layouts = {
    model: [
      { title: "Throughput", unit: "/s", cols: [["rps", "requests/s", "#1f6fb2"], ["errors_per_second", "failures/s", "#c0392b"]] },
      { title: "Latency", unit: "ms", cols: [["p50_ms", "p50", "#2e8b57"], ["p99_ms", "p99", "#d97706"], ["queue_p99_ms", "queue p99", "#7c3aed"]] }
    ],
    service: [
      { title: "Throughput by status", unit: "/s", cols: [["ok_per_second", "2xx/s", "#1f6fb2"], ["client_errors_per_second", "4xx/s", "#d68910"], ["errors_per_second", "5xx/s", "#c0392b"]] },
      { title: "Latency", unit: "ms", cols: [["p50_ms", "p50", "#2e8b57"], ["p99_ms", "p99", "#d97706"]] }
    ],
    features: [
      { title: "Throughput", unit: "/s", cols: [["rps", "reads/s", "#1f6fb2"], ["errors_per_second", "failed/s", "#c0392b"]] },
      { title: "Latency", unit: "ms", cols: [["p50_ms", "p50", "#2e8b57"], ["p99_ms", "p99", "#d97706"]] }
    ],
    view: [
      { title: "Hot subset", unit: "/s", cols: [["hot_hits_per_second", "hot hits/s", "#2e8b57"], ["cold_fallbacks_per_second", "cold fallbacks/s", "#64748b"]] }
    ]
  };

  var charts = {}; // "<id>#<chart index>" -> uPlot
  var sections = [];

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function titleOf(id) {
    var i = id.indexOf("/");
    var kind = id.slice(0, i), name = id.slice(i + 1);
    if (kind === "features") return "Online feature reads";
    return (kind === "view" ? "view " : kind === "service" ? "service " : "model ") + name;
  }

  // timeLabels writes the x axis's ticks (unix seconds) in local time:
  // HH:MM when the ticks are a minute or more apart, else HH:MM:SS.
  function timeLabels(u, vals, axisIdx, foundSpace, foundIncr) {
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    var labels = vals.map(function (v) {
      var d = new Date(v * 1000);
      var s = pad(d.getHours()) + ":" + pad(d.getMinutes());
      return foundIncr >= 60 ? s : s + ":" + pad(d.getSeconds());
    });
    // Where the ticks went, for the browser tests' overlap check.
    u.root.dataset.xticks = JSON.stringify(vals.map(function (v, i) {
      return [Math.round(u.valToPos(v, "x")), labels[i]];
    }));
    return labels;
  }

  function fmt(unit) {
    return function (u, v) {
      if (v == null) return "—";
      return (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2)) + " " + unit;
    };
  }

  // active reports whether a series saw any traffic in the window.
  function active(cols) {
    return Object.keys(cols).some(function (k) {
      return cols[k].some(function (v) { return v != null && v > 0; });
    });
  }

  function draw(section, kind, data) {
    var ids = Object.keys(data.series).sort();
    var placeholder = section.querySelector(".collecting");
    if (data.t.length === 0 || ids.length === 0) {
      if (placeholder) {
        placeholder.textContent = data.error ? "Metrics unavailable: " + data.error
          : "Collecting samples for the live charts… (one every " + data.interval_seconds + " s)";
      }
      return;
    }
    if (placeholder) placeholder.remove();
    var idle = [];
    ids.forEach(function (id) {
      var cols = data.series[id];
      if (!charts[id + "#0"] && !active(cols)) {
        idle.push(id.slice(id.indexOf("/") + 1));
        return;
      }
      layouts[kind].forEach(function (layout, ci) {
        var key = id + "#" + ci;
        var rows = [data.t].concat(layout.cols.map(function (c) { return cols[c[0]] || []; }));
        var chart = charts[key];
        if (chart) {
          chart.setData(rows);
          return;
        }
        var card = el("div", "chart-card");
        card.dataset.series = id;
        card.appendChild(el("h3", null, titleOf(id) + " · " + layout.title));
        var target = el("div", "chart");
        card.appendChild(target);
        section.insertBefore(card, section.querySelector(".idle"));
        var width = Math.max(300, target.clientWidth || section.clientWidth / 2 - 40);
        charts[key] = new uPlot({
          width: width,
          height: 170,
          legend: { live: true },
          cursor: { drag: { x: false, y: false } },
          scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, Math.max(max || 0, 1) * 1.1]; } } },
          // Time labels at least 90 px apart and as short as the span
          // allows (HH:MM, HH:MM:SS within a minute), so they never overlap.
          axes: [{ space: 90, values: timeLabels }, { values: function (u, vals) { return vals.map(function (v) { return fmt(layout.unit)(u, v); }); }, size: 70 }],
          series: [{}].concat(layout.cols.map(function (c) {
            return { label: c[1], stroke: c[2], width: 1.6, spanGaps: false, value: fmt(layout.unit) };
          }))
        }, rows, target);
      });
    });
    var note = section.querySelector(".idle");
    if (idle.length > 0) {
      if (!note) {
        note = el("p", "muted idle");
        section.appendChild(note);
      }
      note.textContent = "No traffic in the last " + Math.round(data.t.length * data.interval_seconds) + " s: " + idle.join(", ");
    } else if (note) {
      note.remove();
    }
  }

  function poll(section) {
    var kind = section.dataset.series;
    return fetch(prefix + "api/series?kind=" + encodeURIComponent(kind), { headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error("series: HTTP " + r.status);
        return r.json();
      })
      .then(function (data) {
        draw(section, kind, data);
        return data.interval_seconds;
      });
  }

  function startCharts() {
    sections = Array.prototype.slice.call(document.querySelectorAll("section.charts[data-series]"));
    if (sections.length === 0 || typeof uPlot === "undefined") {
      root.dataset.charts = "none";
      return;
    }
    var pending = sections.map(poll);
    Promise.all(pending).then(function (intervals) {
      root.dataset.charts = "ready";
      var every = Math.max(1, Math.min.apply(null, intervals.concat([10]))) * 1000;
      setInterval(function () { sections.forEach(poll); }, every);
    }).catch(function (err) {
      root.dataset.charts = "error";
      console.warn("console charts:", err.message);
    });
    window.addEventListener("resize", function () {
      Object.keys(charts).forEach(function (k) {
        var c = charts[k];
        var w = c.root.parentNode.clientWidth;
        if (w > 0) c.setSize({ width: w, height: 170 });
      });
    });
  }

  // Refresh the tables: fetch this page again and swap in its content
  // before the charts, leaving the charts (and their history) in place.
  function startRefresh() {
    var main = document.getElementById("page");
    var every = parseInt(main && main.dataset.refresh, 10);
    if (!every) return;
    setInterval(function () {
      fetch(window.location.href, { headers: { Accept: "text/html" } })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(new Error("HTTP " + r.status)); })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("page");
          if (!fresh) return;
          var keep = main.querySelector("section.charts");
          // Replace every node before the first chart section.
          while (main.firstChild && main.firstChild !== keep && !(keep && main.firstChild.contains(keep))) {
            main.removeChild(main.firstChild);
          }
          var anchor = main.firstChild;
          Array.prototype.slice.call(fresh.childNodes).some(function (n) {
            if (n.nodeType === 1 && n.matches("section.charts")) return true;
            main.insertBefore(document.importNode(n, true), anchor);
            return false;
          });
          var headerTime = document.querySelector("header.top time");
          var freshTime = doc.querySelector("header.top time");
          if (headerTime && freshTime) headerTime.replaceWith(document.importNode(freshTime, true));
        })
        .catch(function (err) { console.warn("console refresh:", err.message); });
    }, every * 1000);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { startCharts(); startRefresh(); });
  } else {
    startCharts();
    startRefresh();
  }
})();
