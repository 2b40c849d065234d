// traceanalyzer report: the interactive GPU timeline. Data comes from the JSON block
// #ta-data; every string from the trace is shown with textContent, never parsed as HTML.
(function () {
  "use strict";
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
  var node = document.getElementById("ta-data");
  var canvas = document.getElementById("tl-canvas");
  if (!node || !canvas) return;
  var data = JSON.parse(node.textContent);
  if (!data || !data.windows || !data.windows.length) return;
  var tip = document.getElementById("tl-tip");
  var select = document.getElementById("tl-window");
  var info = document.getElementById("tl-info");
  var LABEL_W = 150, LANE_H = 20, MARK_H = 18, AXIS_H = 22, TOP = MARK_H + 6;
  var win = null, view0 = 0, view1 = 1, highlight = -1, colors = {};

  data.windows.forEach(function (w, i) {
    var opt = document.createElement("option");
    opt.value = String(i);
    opt.textContent = w.label;
    select.appendChild(opt);
  });
  select.addEventListener("change", function () { setWindow(+select.value, -1); });

  function readColors() {
    var cs = getComputedStyle(document.documentElement);
    function v(name) { return cs.getPropertyValue(name).trim() || "#888"; }
    colors = { fg: v("--fg"), muted: v("--muted"), grid: v("--grid"), gap: v("--gap"),
      mark: v("--mark"), bg: v("--card"), accent: v("--accent"), cat: {} };
    data.categories.forEach(function (c) { colors.cat[c] = v("--c-" + c); });
  }

  function setWindow(i, finding) {
    win = data.windows[i];
    select.value = String(i);
    view0 = win.start; view1 = win.end;
    highlight = finding;
    var ctx = canvas.getContext("2d");
    ctx.font = "11px system-ui, sans-serif";
    LABEL_W = 70;
    win.lanes.forEach(function (l) { LABEL_W = Math.max(LABEL_W, ctx.measureText(l).width + 14); });
    LABEL_W = Math.min(LABEL_W, 260);
    var n = win.lanes.length;
    LANE_H = n <= 2 ? 34 : (n <= 6 ? 26 : (n <= 24 ? 20 : 14));
    var txt = win.rects.length + " rectangles from " + win.activities + " GPU activities";
    if (win.merged_ns > 0) txt += "; activities closer than " + fmtNs(win.merged_ns) +
      " on a stream are merged";
    info.textContent = txt + ". Scroll to zoom, drag to pan, double-click to reset.";
    resize();
  }

  function fmtNs(ns) {
    var a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + " ns";
    if (a < 1e6) return (ns / 1e3).toPrecision(3) + " µs";
    if (a < 1e9) return (ns / 1e6).toPrecision(4) + " ms";
    return (ns / 1e9).toPrecision(4) + " s";
  }

  function height() {
    return TOP + win.lanes.length * LANE_H + AXIS_H + ((data.steps || []).length ? 14 : 0);
  }

  function resize() {
    var dpr = window.devicePixelRatio || 1;
    var w = canvas.clientWidth || 800;
    canvas.style.height = height() + "px";
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(height() * dpr);
    draw();
  }

  function xOf(t) {
    var w = canvas.clientWidth - LABEL_W - 8;
    return LABEL_W + (t - view0) / (view1 - view0) * w;
  }
  function tOf(x) {
    var w = canvas.clientWidth - LABEL_W - 8;
    return view0 + (x - LABEL_W) / w * (view1 - view0);
  }

  function laneOfMark(m) {
    if (m.stream === null || m.stream === undefined) return -1;
    for (var i = 0; i < win.lane_keys.length; i++) {
      var k = win.lane_keys[i];
      if (k[2] === m.stream && (m.device === null || m.device === undefined || k[1] === m.device) &&
          (m.rank === null || m.rank === undefined || k[0] === m.rank)) return i;
    }
    return -1;
  }

  function draw() {
    var ctx = canvas.getContext("2d");
    var dpr = window.devicePixelRatio || 1;
    var W = canvas.clientWidth, H = height();
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    var y0 = TOP, lanesH = win.lanes.length * LANE_H;
    // idle gaps of the whole GPU
    ctx.fillStyle = colors.gap;
    win.gaps.forEach(function (g) {
      var s = win.start + g[0], e = s + g[1];
      if (e < view0 || s > view1) return;
      var x0 = Math.max(xOf(s), LABEL_W), x1 = Math.min(xOf(e), W - 8);
      ctx.fillRect(x0, y0, Math.max(x1 - x0, 1), lanesH);
    });
    // lanes
    for (var i = 0; i < win.lanes.length; i++) {
      ctx.strokeStyle = colors.grid;
      ctx.beginPath(); ctx.moveTo(LABEL_W, y0 + (i + 1) * LANE_H - 0.5);
      ctx.lineTo(W - 8, y0 + (i + 1) * LANE_H - 0.5); ctx.stroke();
      ctx.fillStyle = colors.muted;
      ctx.fillText(win.lanes[i], 4, y0 + i * LANE_H + LANE_H / 2);
    }
    ctx.fillText("findings", 4, MARK_H / 2 + 2);
    win.rects.forEach(function (r) {
      var s = win.start + r[1], e = s + r[2];
      if (e < view0 || s > view1) return;
      var x0 = Math.max(xOf(s), LABEL_W), x1 = Math.min(xOf(e), W - 8);
      ctx.fillStyle = colors.cat[data.categories[r[4]]] || colors.muted;
      ctx.fillRect(x0, y0 + r[0] * LANE_H + 2, Math.max(x1 - x0, 0.6), LANE_H - 4);
      if (x1 - x0 > 60) {
        ctx.save(); ctx.beginPath(); ctx.rect(x0, y0, x1 - x0 - 2, H); ctx.clip();
        ctx.fillStyle = "#fff";
        ctx.fillText(data.short[r[3]], x0 + 3, y0 + r[0] * LANE_H + LANE_H / 2);
        ctx.restore();
      }
    });
    // step boundaries: dashed lines with the step number
    ctx.save();
    ctx.strokeStyle = colors.muted; ctx.fillStyle = colors.muted; ctx.setLineDash([3, 3]);
    var lastLabelX = -1e9;
    (data.steps || []).forEach(function (st) {
      if (st[0] < view0 || st[0] > view1) return;
      var x = xOf(st[0]);
      ctx.beginPath(); ctx.moveTo(x, y0); ctx.lineTo(x, y0 + lanesH); ctx.stroke();
      if (x - lastLabelX > 40 && st[2]) {
        ctx.fillText("step " + st[2], x + 2, y0 + lanesH + 28);
        lastLabelX = x;
      }
    });
    ctx.restore();
    // finding marks: a band in the findings row, an outline on the stream's lane
    data.marks.forEach(function (m) {
      if (m.e < view0 || m.s > view1) return;
      var x0 = Math.max(xOf(m.s), LABEL_W), x1 = Math.min(xOf(m.e), W - 8);
      var wdt = Math.max(x1 - x0, 3);
      var hot = (m.f === highlight);
      ctx.fillStyle = hot ? colors.accent : colors.mark;
      ctx.globalAlpha = hot ? 1 : 0.8;
      ctx.fillRect(x0, 3, wdt, MARK_H - 4);
      ctx.globalAlpha = 1;
      var lane = laneOfMark(m);
      ctx.strokeStyle = hot ? colors.accent : colors.mark;
      ctx.lineWidth = hot ? 2.5 : 1.5;
      if (lane >= 0) ctx.strokeRect(x0, y0 + lane * LANE_H + 1, wdt, LANE_H - 2);
      else ctx.strokeRect(x0, y0, wdt, lanesH);
      ctx.lineWidth = 1;
    });
    // time axis, relative to the window start
    ctx.fillStyle = colors.muted; ctx.strokeStyle = colors.grid;
    var ticks = 8;
    for (var k = 0; k <= ticks; k++) {
      var t = view0 + (view1 - view0) * k / ticks;
      var x = xOf(t);
      ctx.beginPath(); ctx.moveTo(x, y0 + lanesH); ctx.lineTo(x, y0 + lanesH + 4); ctx.stroke();
      ctx.textAlign = k === 0 ? "left" : (k === ticks ? "right" : "center");
      ctx.fillText(fmtNs(t - win.start), x, y0 + lanesH + 13);
    }
    ctx.textAlign = "left";
  }

  function hit(x, y) {
    var t = tOf(x), tol = 3 * (view1 - view0) / (canvas.clientWidth - LABEL_W);
    if (y < MARK_H + 2) {
      var found = null;
      data.marks.forEach(function (m) { if (t >= m.s - tol && t <= m.e + tol) found = m; });
      return found ? { mark: found } : null;
    }
    var lane = Math.floor((y - TOP) / LANE_H);
    if (lane < 0 || lane >= win.lanes.length) return null;
    var best = null;
    win.rects.forEach(function (r) {
      if (r[0] !== lane) return;
      var s = win.start + r[1], e = s + r[2];
      if (t >= s - tol && t <= e + tol) best = r;
    });
    if (best) return { rect: best };
    var gap = null;
    win.gaps.forEach(function (g) {
      var s = win.start + g[0];
      if (t >= s && t <= s + g[1]) gap = g;
    });
    return gap ? { gap: gap } : null;
  }

  canvas.addEventListener("mousemove", function (ev) {
    var rect = canvas.getBoundingClientRect();
    var x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    if (drag) {
      var dt = (drag.x - x) * (view1 - view0) / (canvas.clientWidth - LABEL_W - 8);
      view0 = drag.v0 + dt; view1 = drag.v1 + dt; draw(); return;
    }
    var h = hit(x, y);
    if (!h) { tip.style.display = "none"; return; }
    var text;
    if (h.rect) {
      var r = h.rect;
      text = data.names[r[3]] + "\n" + data.categories[r[4]] + " · " + fmtNs(r[2]) +
        " · starts at +" + fmtNs(r[1]) + (r[5] > 1 ? "\n(" + r[5] + " activities merged; longest named)" : "");
    } else if (h.mark) {
      text = h.mark.label + "\n" + fmtNs(h.mark.e - h.mark.s) + " at +" + fmtNs(h.mark.s - win.start);
    } else {
      text = "GPU idle (all streams) for " + fmtNs(h.gap[1]);
    }
    tip.textContent = text;
    tip.style.display = "block";
    var left = Math.min(x + 14, canvas.clientWidth - 300);
    tip.style.left = Math.max(left, 0) + "px";
    tip.style.top = (y + 16) + "px";
  });
  canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  var drag = null;
  canvas.addEventListener("mousedown", function (ev) {
    drag = { x: ev.clientX - canvas.getBoundingClientRect().left, v0: view0, v1: view1 };
    canvas.style.cursor = "grabbing";
  });
  window.addEventListener("mouseup", function () { drag = null; canvas.style.cursor = ""; });
  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var x = ev.clientX - canvas.getBoundingClientRect().left;
    var t = tOf(Math.max(x, LABEL_W));
    var f = ev.deltaY > 0 ? 1.25 : 0.8;
    var span = Math.max((view1 - view0) * f, 100);
    view0 = t - (t - view0) * span / (view1 - view0);
    view1 = view0 + span;
    draw();
  }, { passive: false });
  canvas.addEventListener("dblclick", function () { view0 = win.start; view1 = win.end; draw(); });
  function zoom(f) {
    var mid = (view0 + view1) / 2, half = Math.max((view1 - view0) * f / 2, 50);
    view0 = mid - half; view1 = mid + half; draw();
  }
  document.getElementById("tl-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("tl-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("tl-reset").addEventListener("click", function () {
    view0 = win.start; view1 = win.end; draw();
  });
  // "show on timeline" links of findings
  document.querySelectorAll("a.tl-link").forEach(function (a) {
    a.addEventListener("click", function () {
      var f = +a.getAttribute("data-finding");
      var wi = data.finding_windows[f];
      setWindow(wi === null || wi === undefined ? 0 : wi, f);
      var wrap = document.getElementById("tl-wrap");
      wrap.classList.remove("flash"); void wrap.offsetWidth; wrap.classList.add("flash");
    });
  });
  readColors();
  if (window.matchMedia) {
    var mq = window.matchMedia("(prefers-color-scheme: dark)");
    var redraw = function () { readColors(); draw(); };
    if (mq.addEventListener) mq.addEventListener("change", redraw);
  }
  window.addEventListener("resize", resize);
  document.getElementById("tl-wrap").hidden = false;
  document.getElementById("tl-controls").hidden = false;
  var nojs = document.getElementById("tl-nojs");
  if (nojs) nojs.hidden = true;
  setWindow(0, -1);
})();
