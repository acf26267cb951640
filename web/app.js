// Shoal chat page: conversations in localStorage, streaming answers from
// POST /v1/chat/completions (SSE over fetch), Markdown via marked + DOMPurify,
// code highlighted with highlight.js. No framework, no build step.
"use strict";

(function () {
  const STORE_CONVERSATIONS = "shoal.conversations";
  const STORE_CURRENT = "shoal.current";
  const STORE_SETTINGS = "shoal.settings";

  const $ = (id) => document.getElementById(id);
  const el = {
    messages: $("messages"),
    empty: $("empty-state"),
    composer: $("composer"),
    input: $("input"),
    send: $("send"),
    stop: $("stop"),
    list: $("conversation-list"),
    newChat: $("new-chat"),
    sidebar: $("sidebar"),
    toggleSidebar: $("toggle-sidebar"),
    settings: $("settings"),
    toggleSettings: $("toggle-settings"),
    closeSettings: $("close-settings"),
    resetSettings: $("reset-settings"),
    model: $("set-model"),
    system: $("set-system"),
    temperature: $("set-temperature"),
    topP: $("set-top-p"),
    topK: $("set-top-k"),
    maxTokens: $("set-max-tokens"),
    apiKey: $("set-api-key"),
    status: $("server-status"),
    modelName: $("model-name"),
    banner: $("loading-banner"),
    bannerDetail: $("loading-detail"),
    bannerBar: $("loading-bar"),
  };

  // ---------- storage ----------

  function load(key, fallback) {
    try {
      const v = JSON.parse(localStorage.getItem(key));
      return v === null || v === undefined ? fallback : v;
    } catch (_) {
      return fallback;
    }
  }
  function save(key, value) {
    try {
      localStorage.setItem(key, JSON.stringify(value));
    } catch (_) {
      /* full or disabled: the page still works for this visit */
    }
  }

  let conversations = load(STORE_CONVERSATIONS, []);
  if (!Array.isArray(conversations)) conversations = [];
  let currentId = load(STORE_CURRENT, null);
  let settings = Object.assign(defaultSettings(), load(STORE_SETTINGS, {}));

  function defaultSettings() {
    return { model: "", system: "", temperature: "", top_p: "", top_k: "", max_tokens: "", api_key: "" };
  }
  function saveConversations() {
    save(STORE_CONVERSATIONS, conversations);
    save(STORE_CURRENT, currentId);
  }
  function current() {
    return conversations.find((c) => c.id === currentId) || null;
  }
  function newId() {
    return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  }

  function authHeaders(extra) {
    const h = Object.assign({}, extra || {});
    const key = (settings.api_key || "").trim();
    if (key) h["Authorization"] = "Bearer " + key;
    return h;
  }

  // ---------- markdown ----------

  const hasLibs = () => window.marked && window.DOMPurify;
  let markedReady = false;
  function setupMarked() {
    if (markedReady || !window.marked) return;
    markedReady = true;
    if (window.hljs && hljs.configure) {
      hljs.configure({ hideUpgradeWarningAcceptNoSupportOrSecurityUpdates: true });
    }
    marked.setOptions({
      gfm: true,
      breaks: false,
      langPrefix: "hljs language-",
      highlight: function (code, lang) {
        if (!window.hljs) return code;
        try {
          const name = (lang || "").trim().split(/\s+/)[0];
          if (name && hljs.getLanguage(name)) return hljs.highlight(name, code, true).value;
          if (code.length < 20000) return hljs.highlightAuto(code).value;
        } catch (_) {
          /* fall through: plain text */
        }
        return escapeHtml(code);
      },
    });
  }

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }

  // An answer cut off mid code block (still streaming, or stopped at
  // max_tokens) has an unclosed fence, which marked shows as a paragraph:
  // close it so the code renders as code while it streams.
  function closeOpenFence(text) {
    let open = null;
    for (const line of text.split("\n")) {
      const m = /^ {0,3}(`{3,}|~{3,})(.*)$/.exec(line);
      if (!m) continue;
      if (!open) {
        if (!(m[1][0] === "`" && m[2].includes("`"))) open = m[1];
      } else if (m[1][0] === open[0] && m[1].length >= open.length && !m[2].trim()) {
        open = null;
      }
    }
    return open ? text + (text.endsWith("\n") ? "" : "\n") + open : text;
  }

  function renderMarkdown(target, text) {
    if (!hasLibs()) {
      target.textContent = text;
      return;
    }
    setupMarked();
    const html = DOMPurify.sanitize(marked.parse(closeOpenFence(text || "")));
    target.innerHTML = html;
    for (const pre of target.querySelectorAll("pre")) {
      const code = pre.querySelector("code");
      if (code && !code.classList.contains("hljs")) code.classList.add("hljs");
      const copy = document.createElement("button");
      copy.type = "button";
      copy.className = "copy-code";
      copy.textContent = "Copy";
      copy.addEventListener("click", () => {
        const text = code ? code.innerText : pre.innerText;
        const done = () => {
          copy.textContent = "Copied";
          setTimeout(() => (copy.textContent = "Copy"), 1200);
        };
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(text).then(done, () => {});
        }
      });
      pre.appendChild(copy);
    }
    for (const a of target.querySelectorAll("a[href]")) {
      a.target = "_blank";
      a.rel = "noopener noreferrer";
    }
  }

  // ---------- conversation list ----------

  function renderList() {
    el.list.textContent = "";
    const sorted = conversations.slice().sort((a, b) => (b.updated || 0) - (a.updated || 0));
    for (const c of sorted) {
      const li = document.createElement("li");
      li.className = "conversation" + (c.id === currentId ? " active" : "");
      li.dataset.id = c.id;
      const title = document.createElement("button");
      title.type = "button";
      title.className = "conversation-title";
      title.textContent = c.title || "New chat";
      title.title = c.title || "New chat";
      title.addEventListener("click", () => switchTo(c.id));
      const del = document.createElement("button");
      del.type = "button";
      del.className = "conversation-delete";
      del.setAttribute("aria-label", "Delete conversation");
      del.title = "Delete";
      del.textContent = "✕";
      del.addEventListener("click", (e) => {
        e.stopPropagation();
        removeConversation(c.id);
      });
      li.append(title, del);
      el.list.appendChild(li);
    }
  }

  function switchTo(id) {
    if (streaming) stopStreaming();
    currentId = id;
    saveConversations();
    renderList();
    renderMessages();
    closeSidebarOnNarrow();
    el.input.focus();
  }

  function newConversation() {
    if (streaming) stopStreaming();
    const existing = current();
    if (existing && existing.messages.length === 0) {
      el.input.focus();
      closeSidebarOnNarrow();
      return existing;
    }
    const c = { id: newId(), title: "", messages: [], created: Date.now(), updated: Date.now() };
    conversations.push(c);
    currentId = c.id;
    saveConversations();
    renderList();
    renderMessages();
    closeSidebarOnNarrow();
    el.input.focus();
    return c;
  }

  function removeConversation(id) {
    if (streaming && id === currentId) stopStreaming();
    conversations = conversations.filter((c) => c.id !== id);
    if (currentId === id) {
      const next = conversations.slice().sort((a, b) => (b.updated || 0) - (a.updated || 0))[0];
      currentId = next ? next.id : null;
    }
    saveConversations();
    renderList();
    renderMessages();
  }

  // ---------- messages ----------

  function messageElement(msg) {
    const wrap = document.createElement("div");
    wrap.className = "message " + msg.role;
    const role = document.createElement("div");
    role.className = "role";
    role.textContent = msg.role === "user" ? "You" : "Assistant";
    const content = document.createElement("div");
    content.className = "content";
    if (msg.role === "user") content.textContent = msg.content;
    else renderMarkdown(content, msg.content);
    const meta = document.createElement("div");
    meta.className = "meta";
    if (msg.meta) meta.textContent = msg.meta;
    wrap.append(role, content, meta);
    if (msg.error) wrap.classList.add("error");
    return wrap;
  }

  function renderMessages() {
    el.messages.textContent = "";
    const c = current();
    if (!c || c.messages.length === 0) {
      el.messages.appendChild(el.empty);
      return;
    }
    for (const m of c.messages) el.messages.appendChild(messageElement(m));
    scrollToBottom(true);
  }

  function nearBottom() {
    const m = el.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }
  function scrollToBottom(force) {
    if (force || stickToBottom) el.messages.scrollTop = el.messages.scrollHeight;
  }
  let stickToBottom = true;
  el.messages.addEventListener("scroll", () => {
    stickToBottom = nearBottom();
  });

  // ---------- streaming ----------

  let streaming = false;
  let controller = null;

  function setStreaming(on) {
    streaming = on;
    el.send.hidden = on;
    el.stop.hidden = !on;
    document.body.classList.toggle("streaming", on);
  }

  function stopStreaming() {
    if (controller) controller.abort();
  }

  function numberOrNull(v, integer) {
    if (v === "" || v === null || v === undefined) return null;
    const n = integer ? parseInt(v, 10) : parseFloat(v);
    return Number.isFinite(n) ? n : null;
  }

  function requestBody(conv) {
    const messages = [];
    if (settings.system && settings.system.trim()) messages.push({ role: "system", content: settings.system });
    for (const m of conv.messages) {
      if (m.error) continue;
      messages.push({ role: m.role, content: m.content });
    }
    const body = { messages, stream: true };
    if (settings.model) body.model = settings.model;
    const t = numberOrNull(settings.temperature, false);
    if (t !== null) body.temperature = t;
    const p = numberOrNull(settings.top_p, false);
    if (p !== null) body.top_p = p;
    const k = numberOrNull(settings.top_k, true);
    if (k !== null) body.top_k = k;
    const n = numberOrNull(settings.max_tokens, true);
    if (n !== null) body.max_tokens = n;
    return body;
  }

  async function errorText(res) {
    let detail = "";
    try {
      const text = await res.text();
      try {
        const j = JSON.parse(text);
        detail = (j.error && (j.error.message || j.error)) || j.message || text;
      } catch (_) {
        detail = text;
      }
    } catch (_) {
      /* no body */
    }
    if (res.status === 401) return "Unauthorized: set the server's API key in Settings (⚙).";
    if (res.status === 503) return "The server is not ready yet" + (detail ? ": " + detail : ".");
    return "Error " + res.status + (detail ? ": " + detail : "");
  }

  async function send() {
    const text = el.input.value;
    if (!text.trim() || streaming) return;
    let conv = current();
    if (!conv) conv = newConversation();
    conv.messages.push({ role: "user", content: text });
    if (!conv.title) conv.title = text.trim().replace(/\s+/g, " ").slice(0, 60);
    conv.updated = Date.now();
    el.input.value = "";
    autoGrow();
    saveConversations();
    renderList();
    if (el.empty.parentNode) el.empty.remove();
    el.messages.appendChild(messageElement(conv.messages[conv.messages.length - 1]));

    const answer = { role: "assistant", content: "" };
    // A thinking model's reasoning_content: shown above the answer as a
    // quote while it streams, never sent back in the history.
    let reasoning = "";
    const shown = () =>
      (reasoning ? "> *thinking:* " + reasoning.replace(/\n/g, "\n> ") + "\n\n" : "") + answer.content;
    const node = messageElement(answer);
    node.classList.add("pending");
    const contentNode = node.querySelector(".content");
    const metaNode = node.querySelector(".meta");
    el.messages.appendChild(node);
    stickToBottom = true;
    scrollToBottom(true);

    const body = requestBody(conv);
    controller = new AbortController();
    setStreaming(true);
    const started = performance.now();
    let firstTokenAt = 0;
    let chunks = 0;
    let usage = null;
    let finish = null;
    let renderQueued = false;
    const scheduleRender = () => {
      if (renderQueued) return;
      renderQueued = true;
      requestAnimationFrame(() => {
        renderQueued = false;
        renderMarkdown(contentNode, shown());
        scrollToBottom(false);
      });
    };

    try {
      const res = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: authHeaders({ "Content-Type": "application/json", Accept: "text/event-stream" }),
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!res.ok) throw new Error(await errorText(res));
      if (!res.body || !res.body.getReader) {
        // No streaming support: take the whole answer.
        const j = await res.json();
        answer.content = (j.choices && j.choices[0] && j.choices[0].message && j.choices[0].message.content) || "";
        usage = j.usage || null;
        scheduleRender();
      } else {
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        let done = false;
        const handleEvent = (block) => {
          const data = block
            .split("\n")
            .filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).replace(/^ /, ""))
            .join("\n");
          if (!data) return;
          if (data.trim() === "[DONE]") {
            done = true;
            return;
          }
          let j;
          try {
            j = JSON.parse(data);
          } catch (_) {
            return;
          }
          if (j.error) throw new Error((j.error.message || String(j.error)));
          if (j.usage) usage = j.usage;
          const choice = j.choices && j.choices[0];
          if (!choice) return;
          const thought = choice.delta && choice.delta.reasoning_content;
          if (thought) {
            reasoning += thought;
            node.classList.remove("pending");
            scheduleRender();
          }
          const piece = (choice.delta && choice.delta.content) || (choice.text || "");
          if (piece) {
            if (!firstTokenAt) firstTokenAt = performance.now();
            chunks++;
            answer.content += piece;
            node.classList.remove("pending");
            scheduleRender();
          }
          if (choice.finish_reason) finish = choice.finish_reason;
        };
        while (!done) {
          const { value, done: eof } = await reader.read();
          if (eof) break;
          buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
          let cut;
          while (!done && (cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            handleEvent(block);
          }
        }
        if (!done && buffer.trim()) handleEvent(buffer);
        if (done) reader.cancel().catch(() => {});
      }
    } catch (e) {
      if (e.name === "AbortError") {
        finish = "stopped";
      } else {
        answer.error = true;
        node.classList.add("error");
        const msg = e.message === "Failed to fetch" ? "Cannot reach the server." : e.message;
        if (!answer.content) answer.content = msg;
        else answer.content += "\n\n**" + msg + "**";
      }
    } finally {
      controller = null;
      node.classList.remove("pending");
      renderMarkdown(contentNode, shown());
      const elapsed = (performance.now() - started) / 1000;
      const parts = [];
      const ntok = usage && usage.completion_tokens ? usage.completion_tokens : chunks;
      if (ntok && firstTokenAt) {
        const genSeconds = (performance.now() - firstTokenAt) / 1000;
        parts.push(ntok + " tokens");
        if (genSeconds > 0 && ntok > 1) parts.push(((ntok - 1) / genSeconds).toFixed(1) + " tok/s");
        parts.push("first token " + ((firstTokenAt - started) / 1000).toFixed(2) + " s");
      } else if (!answer.error) {
        parts.push(elapsed.toFixed(1) + " s");
      }
      if (finish === "stopped") parts.push("stopped");
      else if (finish === "length") parts.push("hit max tokens");
      answer.meta = parts.join(" · ");
      metaNode.textContent = answer.meta;
      if (answer.content || !answer.error) {
        conv.messages.push(answer);
        conv.updated = Date.now();
        saveConversations();
        renderList();
      }
      setStreaming(false);
      scrollToBottom(false);
      el.input.focus();
    }
  }

  // ---------- composer ----------

  function autoGrow() {
    const box = el.input;
    box.style.height = "auto";
    const borders = box.offsetHeight - box.clientHeight;
    const want = box.scrollHeight + borders;
    box.style.height = Math.min(want, 240) + "px";
    box.style.overflowY = want > 240 ? "auto" : "hidden";
  }
  el.input.addEventListener("input", autoGrow);
  el.input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      send();
    }
  });
  el.composer.addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
  el.stop.addEventListener("click", stopStreaming);
  el.newChat.addEventListener("click", newConversation);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && streaming) stopStreaming();
  });

  // ---------- sidebar / settings panels ----------

  function closeSidebarOnNarrow() {
    document.body.classList.remove("sidebar-open");
  }
  el.toggleSidebar.addEventListener("click", () => document.body.classList.toggle("sidebar-open"));

  function openSettings(open) {
    el.settings.hidden = !open;
    el.toggleSettings.setAttribute("aria-expanded", String(open));
    if (open) loadModels();
  }
  el.toggleSettings.addEventListener("click", () => openSettings(el.settings.hidden));
  el.closeSettings.addEventListener("click", () => openSettings(false));

  let keyTimer = null;
  const fields = [
    [el.model, "model"],
    [el.system, "system"],
    [el.temperature, "temperature"],
    [el.topP, "top_p"],
    [el.topK, "top_k"],
    [el.maxTokens, "max_tokens"],
    [el.apiKey, "api_key"],
  ];
  function fillSettings() {
    for (const [input, key] of fields) {
      if (input === el.model) ensureModelOption(settings.model);
      input.value = settings[key] === undefined || settings[key] === null ? "" : settings[key];
    }
  }
  for (const [input, key] of fields) {
    const update = () => {
      const before = settings.api_key;
      settings[key] = input.value;
      save(STORE_SETTINGS, settings);
      if (key === "api_key" && before !== settings.api_key) {
        clearTimeout(keyTimer);
        keyTimer = setTimeout(() => {
          modelsLoaded = false;
          modelsUnauthorized = false;
          loadModels();
          loadClusterName();
        }, 500);
      }
    };
    input.addEventListener("input", update);
    input.addEventListener("change", update);
  }
  el.resetSettings.addEventListener("click", () => {
    const key = settings.api_key; // keep the key: it is a credential, not a preference
    settings = Object.assign(defaultSettings(), { api_key: key });
    save(STORE_SETTINGS, settings);
    fillSettings();
  });

  function ensureModelOption(id) {
    if (!id) return;
    for (const o of el.model.options) if (o.value === id) return;
    const o = document.createElement("option");
    o.value = id;
    o.textContent = id;
    el.model.appendChild(o);
  }

  let modelsLoaded = false;
  let modelsUnauthorized = false; // no retry with a key the server refused
  async function loadModels() {
    if (modelsLoaded || modelsUnauthorized) return;
    try {
      const res = await fetch("/v1/models", { headers: authHeaders() });
      if (res.status === 401) modelsUnauthorized = true;
      if (!res.ok) return;
      const j = await res.json();
      const ids = (j.data || []).map((m) => m.id).filter(Boolean);
      for (const id of ids) ensureModelOption(id);
      el.model.value = settings.model || "";
      if (ids.length && !el.modelName.textContent) el.modelName.textContent = ids[0];
      modelsLoaded = true;
    } catch (_) {
      /* server not reachable yet: try again on next open */
    }
  }

  // ---------- server state ----------

  function formatBytes(n) {
    if (!Number.isFinite(n)) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return n.toFixed(i === 0 ? 0 : 1) + " " + units[i];
  }

  function progressFraction(p) {
    if (!p || typeof p !== "object") return null;
    if (Number.isFinite(p.sent_bytes) && Number.isFinite(p.total_bytes) && p.total_bytes > 0)
      return Math.min(1, p.sent_bytes / p.total_bytes);
    if (Number.isFinite(p.fraction)) return p.fraction;
    if (Number.isFinite(p.percent)) return p.percent / 100;
    return null;
  }

  let healthTimer = null;
  async function pollHealth() {
    clearTimeout(healthTimer);
    let next = 5000;
    try {
      const res = await fetch("/health", { cache: "no-store" });
      let j = {};
      try {
        j = await res.json();
      } catch (_) {
        /* not JSON */
      }
      if (res.ok) {
        setStatus("ready", "ready");
        el.status.title = "";
        el.banner.hidden = true;
        loadModels();
      } else if (j.status === "degraded") {
        setStatus("degraded", "degraded");
        el.status.title = j.reason || "";
        el.banner.hidden = true;
        next = 2000;
      } else if (j.status === "loading" || (res.status === 503 && !j.status)) {
        setStatus("loading", "loading");
        const p = j.progress || null;
        const f = progressFraction(p);
        el.banner.hidden = false;
        el.bannerBar.style.width = f === null ? "100%" : (f * 100).toFixed(1) + "%";
        el.bannerBar.classList.toggle("indeterminate", f === null);
        const parts = [];
        if (p && p.device) parts.push("to " + p.device);
        if (p && Number.isFinite(p.sent_bytes) && Number.isFinite(p.total_bytes))
          parts.push(formatBytes(p.sent_bytes) + " / " + formatBytes(p.total_bytes));
        if (f !== null) parts.push((f * 100).toFixed(0) + "%");
        if (p && Number.isFinite(p.mib_per_s) && p.mib_per_s > 0) parts.push(p.mib_per_s.toFixed(0) + " MiB/s");
        el.bannerDetail.textContent = parts.join(" · ");
        next = 1000;
      } else {
        setStatus("error", j.status || "error " + res.status);
        next = 3000;
      }
    } catch (_) {
      setStatus("error", "offline");
      el.banner.hidden = true;
      next = 3000;
    }
    healthTimer = setTimeout(pollHealth, next);
  }
  function setStatus(state, text) {
    el.status.dataset.state = state;
    el.status.textContent = text;
    el.send.disabled = state === "loading";
  }

  async function loadClusterName() {
    try {
      const res = await fetch("/v1/cluster", { headers: authHeaders() });
      if (!res.ok) return;
      const j = await res.json();
      if (j.model && j.model.name) el.modelName.textContent = j.model.name;
    } catch (_) {
      /* optional */
    }
  }

  // ---------- start ----------

  fillSettings();
  if (!current()) {
    const recent = conversations.slice().sort((a, b) => (b.updated || 0) - (a.updated || 0))[0];
    currentId = recent ? recent.id : null;
  }
  renderList();
  renderMessages();
  autoGrow();
  pollHealth();
  loadClusterName();
  loadModels();
  window.addEventListener("storage", (e) => {
    if (e.key === STORE_SETTINGS) {
      settings = Object.assign(defaultSettings(), load(STORE_SETTINGS, {}));
      fillSettings();
    }
  });
  el.input.focus();
})();
