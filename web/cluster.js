// Shoal cluster page: polls GET /v1/cluster, shows one box per device with
// where its layers lie in the model, its memory and RTT, and a live tok/s
// chart (Chart.js). No framework, no build step.
"use strict";

(function () {
  const POLL_MS = 1500;
  const MAX_POINTS = 60;
  const PALETTE = ["#2f7cf6", "#16a37f", "#e0882b", "#b356d6", "#d8455f", "#1aa3b8", "#8a9a22", "#6a6fe0"];

  const $ = (id) => document.getElementById(id);

  function apiKey() {
    try {
      const s = JSON.parse(localStorage.getItem("shoal.settings")) || {};
      return (s.api_key || "").trim();
    } catch (_) {
      return "";
    }
  }
  function headers() {
    const key = apiKey();
    return key ? { Authorization: "Bearer " + key } : {};
  }

  function fmtBytes(n) {
    if (!Number.isFinite(n)) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return (i === 0 ? n.toFixed(0) : n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0)) + " " + units[i];
  }
  function fmtInt(n) {
    return Number.isFinite(n) ? n.toLocaleString() : "—";
  }
  function num(v) {
    return typeof v === "number" && Number.isFinite(v) ? v : NaN;
  }
  function h(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function cssVar(name, fallback) {
    const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return v || fallback;
  }

  // ---------- chart ----------

  let chart = null;
  const points = { labels: [], values: [] };

  function makeChart() {
    if (chart || !window.Chart) return;
    const line = cssVar("--accent", "#2f7cf6");
    const grid = cssVar("--border", "rgba(128,128,128,0.2)");
    const text = cssVar("--muted", "#888");
    chart = new Chart($("tps-chart"), {
      type: "line",
      data: {
        labels: points.labels,
        datasets: [
          {
            label: "tok/s",
            data: points.values,
            borderColor: line,
            backgroundColor: line + "33",
            fill: true,
            tension: 0.3,
            pointRadius: 0,
            borderWidth: 2,
          },
        ],
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        interaction: { intersect: false, mode: "index" },
        plugins: { legend: { display: false } },
        scales: {
          x: { ticks: { color: text, maxTicksLimit: 6, maxRotation: 0 }, grid: { color: grid } },
          y: { beginAtZero: true, suggestedMax: 10, ticks: { color: text }, grid: { color: grid } },
        },
      },
    });
  }

  function addPoint(v) {
    const now = new Date();
    points.labels.push(now.toLocaleTimeString([], { hour12: false }));
    points.values.push(Number.isFinite(v) ? +v.toFixed(2) : null);
    while (points.labels.length > MAX_POINTS) {
      points.labels.shift();
      points.values.shift();
    }
    if (chart) chart.update("none");
  }

  // ---------- rendering ----------

  function setState(state, reason) {
    const pill = $("cluster-state");
    pill.dataset.state = state || "unknown";
    pill.textContent = state || "unknown";
    const t = $("state-text");
    t.textContent = state || "—";
    t.dataset.state = state || "unknown";
    $("state-reason").textContent = reason || "";
  }

  function renderModel(m) {
    m = m || {};
    const name = m.name || (m.file ? String(m.file).split("/").pop() : "—");
    $("model-title").textContent = name;
    $("model-name").textContent = name === "—" ? "" : name;
    const parts = [];
    if (m.arch) parts.push(m.arch);
    if (Number.isFinite(num(m.n_layer))) parts.push(m.n_layer + " layers");
    if (m.file) parts.push(m.file);
    $("model-detail").textContent = parts.join(" · ");
    $("layer-scale-end").textContent = Number.isFinite(num(m.n_layer)) ? String(m.n_layer) : "";
  }

  function renderProgress(p) {
    const box = $("load-progress");
    if (!p) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    const sent = num(p.sent_bytes);
    const total = num(p.total_bytes);
    const f = total > 0 ? Math.min(1, sent / total) : NaN;
    $("load-progress-label").textContent =
      "Loading" + (p.device ? " " + p.device : "") + ": " + fmtBytes(sent) + " / " + fmtBytes(total) +
      (Number.isFinite(f) ? " (" + (f * 100).toFixed(0) + "%)" : "");
    $("load-progress-rate").textContent = Number.isFinite(num(p.mib_per_s)) ? num(p.mib_per_s).toFixed(0) + " MiB/s" : "";
    const bar = $("load-progress-bar");
    bar.style.width = Number.isFinite(f) ? (f * 100).toFixed(1) + "%" : "100%";
    bar.classList.toggle("indeterminate", !Number.isFinite(f));
  }

  function renderThroughput(t) {
    t = t || {};
    const gen = num(t.gen_tok_s);
    $("stat-gen").textContent = Number.isFinite(gen) ? gen.toFixed(1) : "—";
    $("stat-requests").textContent = fmtInt(num(t.requests));
    $("stat-active").textContent =
      (Number.isFinite(num(t.active)) ? t.active : "—") + " / " + (Number.isFinite(num(t.queued)) ? t.queued : "—");
    $("stat-slots").textContent = fmtInt(num(t.slots));
    $("stat-in").textContent = fmtInt(num(t.tokens_in));
    $("stat-out").textContent = fmtInt(num(t.tokens_out));
    addPoint(gen);
  }

  function layerCount(d) {
    const b = num(d.layer_begin);
    const e = num(d.layer_end);
    return Number.isFinite(b) && Number.isFinite(e) ? Math.max(0, e - b) : 0;
  }

  function segment(d, nLayer, color, withLabel) {
    const seg = h("div", "layer-seg");
    const begin = num(d.layer_begin);
    const count = layerCount(d);
    if (nLayer > 0 && Number.isFinite(begin)) {
      seg.style.left = (100 * begin) / nLayer + "%";
      seg.style.width = (100 * count) / nLayer + "%";
    } else {
      seg.style.left = "0";
      seg.style.width = "0";
    }
    seg.style.background = color;
    seg.title = (d.address || "") + ": layers " + begin + "–" + (begin + count - 1) + " (" + count + ")";
    if (withLabel) seg.appendChild(h("span", "", d.remote ? String(d.address || "") : "local"));
    return seg;
  }

  function renderDevices(devices, nLayer) {
    const map = $("layer-map");
    map.textContent = "";
    const list = $("devices");
    list.textContent = "";
    let total = 0;
    devices.forEach((d, i) => {
      const color = PALETTE[i % PALETTE.length];
      const count = layerCount(d);
      total += count;
      map.appendChild(segment(d, nLayer, color, true));

      const box = h("article", "device card");
      box.dataset.address = d.address || "";
      box.dataset.layers = String(count);
      box.dataset.state = d.state || "";
      box.style.setProperty("--device-color", color);

      const head = h("div", "device-head");
      const title = h("div", "device-title");
      title.appendChild(h("span", "swatch"));
      title.appendChild(h("span", "device-address", d.address || "?"));
      head.appendChild(title);
      const tags = h("div", "tags");
      tags.appendChild(h("span", "tag", d.remote ? "remote" : "local"));
      if (d.backend) tags.appendChild(h("span", "tag", d.backend));
      if (d.state) {
        const st = h("span", "tag state", d.state);
        st.dataset.state = d.state;
        tags.appendChild(st);
      }
      head.appendChild(tags);
      box.appendChild(head);

      const begin = num(d.layer_begin);
      const layers = h("div", "device-layers");
      layers.appendChild(
        h("span", "big-number", count > 0 ? String(count) : "0")
      );
      layers.appendChild(
        h(
          "span",
          "muted",
          count > 0 ? " layers · " + begin + "–" + (begin + count - 1) + (nLayer ? " of " + nLayer : "") : " layers"
        )
      );
      box.appendChild(layers);

      const bar = h("div", "layer-bar");
      bar.appendChild(segment(d, nLayer, color, false));
      box.appendChild(bar);

      const weights = num(d.weight_bytes);
      const kv = num(d.kv_bytes);
      // 0 means the device did not report its free memory (or has none left
      // to report): show it as unknown rather than as a full bar.
      const free = num(d.free_bytes) > 0 ? num(d.free_bytes) : NaN;
      const used = (Number.isFinite(weights) ? weights : 0) + (Number.isFinite(kv) ? kv : 0);
      const mem = h("div", "memory");
      const memHead = h("div", "mem-head");
      memHead.appendChild(h("span", "label", "Memory"));
      memHead.appendChild(
        h("span", "", fmtBytes(used) + " used" + (Number.isFinite(free) ? " · " + fmtBytes(free) + " free" : ""))
      );
      mem.appendChild(memHead);
      const memBar = h("div", "mem-bar");
      memBar.title = "weights + KV cache / free";
      const cap = used + (Number.isFinite(free) ? free : 0);
      if (cap > 0 && Number.isFinite(free)) {
        const w = h("div", "mem-weights");
        w.style.width = (100 * (Number.isFinite(weights) ? weights : 0)) / cap + "%";
        const k = h("div", "mem-kv");
        k.style.width = (100 * (Number.isFinite(kv) ? kv : 0)) / cap + "%";
        memBar.append(w, k);
      }
      if (Number.isFinite(free)) mem.appendChild(memBar);
      const legend = h("dl", "facts");
      const fact = (k, v) => {
        legend.appendChild(h("dt", "", k));
        legend.appendChild(h("dd", "", v));
      };
      fact("Weights", fmtBytes(weights));
      fact("KV cache", fmtBytes(kv));
      const rtt = num(d.rtt_ms);
      fact("RTT", d.remote ? (Number.isFinite(rtt) ? (rtt < 10 ? rtt.toFixed(2) : rtt.toFixed(1)) + " ms" : "—") : "in process");
      fact("Share", nLayer > 0 ? ((100 * count) / nLayer).toFixed(0) + "% of layers" : "—");
      mem.appendChild(legend);
      box.appendChild(mem);
      list.appendChild(box);
    });
    $("device-count").textContent =
      devices.length + (devices.length === 1 ? " device" : " devices") + (nLayer ? " · " + total + " / " + nLayer + " layers placed" : "");
  }

  // The cluster supervisor's view: every worker it knows, and whether it is
  // in use (active), connected without layers (idle), gone (lost), back and
  // waiting for the next re-plan (rejoining) or just heard of (discovered).
  function renderMembers(members, t) {
    const section = $("members-section");
    if (!Array.isArray(members)) {
      section.hidden = true;
      return;
    }
    section.hidden = false;
    t = t || {};
    const replans = num(t.replans);
    const rec = num(t.last_recovery_seconds);
    $("members-summary").textContent =
      (Number.isFinite(replans) ? replans + (replans === 1 ? " re-plan" : " re-plans") : "") +
      (replans > 0 && Number.isFinite(rec) ? " · last recovery " + rec.toFixed(2) + " s" : "");
    const list = $("members");
    list.textContent = "";
    members.forEach((m) => {
      const li = h("li", "member");
      li.dataset.address = m.address;
      li.dataset.state = m.state || "";
      li.appendChild(h("span", "member-address", m.address));
      const st = h("span", "tag state", m.state || "?");
      st.dataset.state = m.state || "";
      li.appendChild(st);
      if (m.losses) li.appendChild(h("span", "muted", m.losses + (m.losses === 1 ? " loss" : " losses")));
      if (m.last_error && m.state !== "active") li.appendChild(h("span", "muted member-error", m.last_error));
      list.appendChild(li);
    });
  }

  // Prompts on devices of their own (--prefill-on): where they run, and the
  // caches moved from there to the devices that generate.
  function renderPrompts(devices, moves) {
    const section = $("prompts-section");
    if (!Array.isArray(devices) || devices.length === 0) {
      section.hidden = true;
      return;
    }
    section.hidden = false;
    moves = moves || {};
    const n = num(moves.sequences) || 0;
    const mib = (num(moves.bytes) || 0) / 1048576;
    const s = num(moves.seconds) || 0;
    $("prompts-summary").textContent =
      n + (n === 1 ? " cache" : " caches") + " moved to the devices above · " + mib.toFixed(1) + " MiB in " +
      s.toFixed(2) + " s";
    const list = $("prompt-devices");
    list.textContent = "";
    devices.forEach((d) => {
      const li = h("li", "member prompt-device");
      li.dataset.address = d.address;
      li.appendChild(h("span", "member-address", d.address));
      li.appendChild(h("span", "muted", "layers " + d.layer_begin + "–" + (d.layer_end - 1) + " · " + (d.backend || "")));
      list.appendChild(li);
    });
  }

  // ---------- polling ----------

  let lastDevicesKey = "";
  async function poll() {
    let next = POLL_MS;
    try {
      const res = await fetch("/v1/cluster", { headers: headers(), cache: "no-store" });
      if (res.status === 401) throw new Error("Unauthorized: set the server's API key in the chat page's settings.");
      if (!res.ok) throw new Error("GET /v1/cluster: HTTP " + res.status);
      const j = await res.json();
      $("cluster-error").hidden = true;
      makeChart();
      renderModel(j.model);
      setState(j.state, j.reason);
      renderProgress(j.state === "loading" ? j.progress : null);
      const devices = Array.isArray(j.devices) ? j.devices : [];
      const nLayer = num(j.model && j.model.n_layer) || 0;
      const key = JSON.stringify([devices, nLayer]);
      if (key !== lastDevicesKey) {
        lastDevicesKey = key;
        renderDevices(devices, nLayer);
      }
      renderThroughput(j.throughput);
      renderPrompts(j.prompt_devices, j.cache_moves);
      renderMembers(j.workers, j.throughput);
      document.body.dataset.loaded = "true";
    } catch (e) {
      const box = $("cluster-error");
      box.hidden = false;
      box.textContent = e.message === "Failed to fetch" ? "Cannot reach the server; retrying…" : e.message;
      setState("offline", "");
      next = 3000;
    }
    setTimeout(poll, next);
  }

  const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  if (media && media.addEventListener) {
    media.addEventListener("change", () => {
      if (chart) {
        chart.destroy();
        chart = null;
        makeChart();
      }
    });
  }

  poll();
})();
