/* The run page: lays out the task graph with dagre, shows the selected task and, on a page
   `clearance serve` sent for a run still going, keeps itself up to date (and, for a run whose
   process is gone, watches for a resume).
   Builds every element with createElementNS/textContent: no text is ever parsed as HTML
   into this document (a fetched page is parsed by DOMParser, which runs nothing, and only
   its elements, escaped by the server, are moved in). */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var POLL_MS = 1000;
  var WATCH_MS = 15000;  // a run whose process is gone: polled slowly, to show a resume
  var data = JSON.parse(document.getElementById("graph-data").textContent);
  var svg = document.getElementById("graph");
  var nodes = {};
  var edges = [];
  var current = null;
  var MAX_LABEL = 30;

  function short(text) {
    return text.length > MAX_LABEL ? text.slice(0, MAX_LABEL - 1) + "\u2026" : text;
  }

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (key) { node.setAttribute(key, String(attrs[key])); });
    parent.appendChild(node);
    return node;
  }

  function draw() {
    svg.querySelectorAll(".edge, .node").forEach(function (old) { old.remove(); });
    nodes = {};
    edges = [];
    var g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 16, ranksep: 46, marginx: 10, marginy: 10 });
    g.setDefaultEdgeLabel(function () { return {}; });
    data.nodes.forEach(function (n) {
      var chars = Math.max(short(n.id).length, n.label.length);
      g.setNode(String(n.index), { width: Math.max(110, chars * 7 + 22), height: 42 });
    });
    data.edges.forEach(function (e) { g.setEdge(String(e[0]), String(e[1])); });
    dagre.layout(g);

    g.edges().forEach(function (e) {
      var points = g.edge(e).points;
      var d = points.map(function (p, i) { return (i ? "L" : "M") + p.x + " " + p.y; }).join(" ");
      edges.push({ from: e.v, to: e.w, path: el("path", { "class": "edge", d: d, "marker-end": "url(#arrow)" }, svg) });
    });
    data.nodes.forEach(function (n) {
      var box = g.node(String(n.index));
      var group = el("g", {
        "class": "node status-" + n.status.replace(/[^a-z_-]/gi, ""),
        transform: "translate(" + (box.x - box.width / 2) + "," + (box.y - box.height / 2) + ")",
        tabindex: 0, role: "button", "data-task": n.index
      }, svg);
      el("title", {}, group).textContent = n.id + " (" + n.label + ")";
      el("rect", { width: box.width, height: box.height, rx: 6 }, group);
      el("text", { x: 10, y: 17 }, group).textContent = short(n.id);
      el("text", { x: 10, y: 33, "class": "sub" }, group).textContent = n.label;
      nodes[String(n.index)] = group;
    });
    var size = g.graph();
    natural = { width: Math.ceil(size.width || 0), height: Math.ceil(size.height || 0) };
    svg.setAttribute("viewBox", "0 0 " + natural.width + " " + natural.height);
    zoom(scale);
  }

  /* The graph is drawn at `scale` times its laid-out size (the viewBox keeps its shape). */
  var natural = { width: 0, height: 0 };
  var scale = 1;
  var zoomed = false;  // a person zoomed: a redraw keeps their scale instead of fitting
  function zoom(to) {
    scale = Math.min(4, Math.max(0.2, to));
    svg.setAttribute("width", Math.round(natural.width * scale));
    svg.setAttribute("height", Math.round(natural.height * scale));
  }
  /* Fit: the whole graph in the pane's width, never larger than drawn. */
  function fit() {
    var room = svg.parentNode.clientWidth - 2;
    zoom(natural.width > room && room > 0 ? room / natural.width : 1);
  }
  function tool(id, action) {
    var button = document.getElementById(id);
    if (button) { button.addEventListener("click", action); }
  }

  /* `remember`: write the choice into the address (#task-N). Not for the first selection: a
     fragment written before the page has loaded makes the browser scroll to it. */
  function select(key, remember) {
    var panel = document.getElementById("task-" + key);
    if (!panel) { return; }
    current = key;
    document.querySelectorAll("article.detail").forEach(function (a) { a.hidden = a !== panel; });
    document.querySelectorAll("button.pick, button.tl-pick").forEach(function (b) {
      b.setAttribute("aria-pressed", b.getAttribute("data-task") === key ? "true" : "false");
    });
    var cleared = (data.cleared[key] || []).map(String);
    Object.keys(nodes).forEach(function (k) {
      var cls = nodes[k].classList;
      cls.toggle("is-selected", k === key);
      cls.toggle("is-cleared", k !== key && cleared.indexOf(k) >= 0);
      cls.toggle("is-hidden", key !== "coordinator" && k !== key && cleared.indexOf(k) < 0);
    });
    edges.forEach(function (edge) {
      var hidden = nodes[edge.from].classList.contains("is-hidden") ||
        nodes[edge.to].classList.contains("is-hidden");
      edge.path.classList.toggle("is-hidden", hidden);
    });
    if (remember && window.location.hash !== "#task-" + key) {
      history.replaceState(null, "", "#task-" + key);
    }
  }

  /* One listener for every element that picks a task (graph node, task list, timeline), so
     elements a refresh puts in need no listener of their own. */
  function picked(event) {
    var target = event.target.closest ? event.target.closest("[data-task]") : null;
    if (!target || !target.closest("#graph, #task-list, #timeline")) { return null; }
    return target.getAttribute("data-task");
  }
  document.addEventListener("click", function (event) {
    var key = picked(event);
    if (key !== null) { select(key, true); }
  });
  svg.addEventListener("keydown", function (event) {
    var key = picked(event);
    if (key !== null && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      select(key, true);
    }
  });

  /* Live refresh: while the run goes on, ask its state about once a second (304: nothing
     new); when it changed, fetch this page again and put in what differs, keeping the
     selected task, the timeline's open state and the scroll position. */
  function same(a, b) { return a.innerHTML === b.innerHTML; }
  function swapById(doc, id) {
    var now = document.getElementById(id);
    var next = doc.getElementById(id);
    if (now && next && !same(now, next)) { now.innerHTML = next.innerHTML; }
  }
  function refresh(doc) {
    var x = window.scrollX;
    var y = window.scrollY;
    ["run-header", "timeline", "task-list"].forEach(function (id) { swapById(doc, id); });
    var pane = document.querySelector(".detail-pane");
    var legend = pane.querySelector(".kinds");
    doc.querySelectorAll(".detail-pane article.detail").forEach(function (next) {
      var now = document.getElementById(next.id);
      if (!now) {
        now = document.importNode(next, true);
        now.hidden = true;
        pane.insertBefore(now, legend);
      } else if (!same(now, next)) {
        now.innerHTML = next.innerHTML;
      }
    });
    var graph = doc.getElementById("graph-data");
    if (graph && graph.textContent !== document.getElementById("graph-data").textContent) {
      document.getElementById("graph-data").textContent = graph.textContent;
      data = JSON.parse(graph.textContent);
      draw();
      if (!zoomed) { fit(); }
    }
    if (current === null && data.nodes.length) { current = String(data.nodes[0].index); }
    if (current !== null) { select(current); }
    window.scrollTo(x, y);
  }
  /* `watching`: the page shows the run's process gone; it asks about every WATCH_MS whether
     the run was resumed (`gone=1`: 304 while it is still gone and nothing is new). */
  function poll(state, seq, failures, watching) {
    var body = document.body;
    var every = watching ? WATCH_MS : POLL_MS;
    function again(ms, nextSeq, nextFailures, nextWatching) {
      window.setTimeout(function () { poll(state, nextSeq, nextFailures, nextWatching); }, ms);
    }
    if (document.hidden) { again(every, seq, failures, watching); return; }  // a background tab waits
    var asked = state + "?since=" + encodeURIComponent(seq) + (watching ? "&gone=1" : "");
    fetch(asked, { cache: "no-store", credentials: "same-origin" })
      .then(function (response) {
        if (response.status === 304) { return null; }
        if (!response.ok) { throw new Error("state: HTTP " + response.status); }
        return response.json();
      })
      .then(function (news) {
        if (news === null) { again(every, seq, 0, watching); return null; }
        return fetch(window.location.pathname, { cache: "no-store", credentials: "same-origin" })
          .then(function (response) {
            if (!response.ok) { throw new Error("page: HTTP " + response.status); }
            return response.text();
          })
          .then(function (text) {
            var doc = new DOMParser().parseFromString(text, "text/html");
            refresh(doc);
            var nextSeq = doc.body.getAttribute("data-seq") || String(news.seq);
            body.setAttribute("data-seq", nextSeq);
            /* The page was fetched after the state: it says what the run is now. */
            if (doc.body.hasAttribute("data-live")) {
              body.removeAttribute("data-watch");
              body.setAttribute("data-live", state);
              again(POLL_MS, nextSeq, 0, false);
            } else if (doc.body.hasAttribute("data-watch")) {  // gone: watch for a resume
              body.removeAttribute("data-live");
              body.setAttribute("data-watch", state);
              again(WATCH_MS, nextSeq, 0, true);
            } else {
              body.removeAttribute("data-live");  // finished: no more polling
              body.removeAttribute("data-watch");
              body.setAttribute("data-finished", "true");
            }
          });
      })
      .catch(function () {  // the server stopped, say: try again, less and less often
        body.setAttribute("data-poll-failures", String(failures + 1));
        again(Math.min(30000, every * Math.pow(2, failures + 1)), seq, failures + 1, watching);
      });
  }

  draw();
  fit();
  tool("zoom-fit", function () { zoomed = false; fit(); });
  tool("zoom-in", function () { zoomed = true; zoom(scale * 1.25); });
  tool("zoom-out", function () { zoomed = true; zoom(scale / 1.25); });
  var wanted = window.location.hash.replace(/^#task-/, "");
  if (document.getElementById("task-" + wanted)) {
    select(wanted);
  } else if (data.nodes.length) {
    select(String(data.nodes[0].index));
  } else if (document.getElementById("task-coordinator")) {
    select("coordinator");
  }
  var live = document.body.getAttribute("data-live");
  var watched = document.body.getAttribute("data-watch");
  var seq = document.body.getAttribute("data-seq") || "0";
  if (window.fetch && window.DOMParser) {
    if (live) {
      window.setTimeout(function () { poll(live, seq, 0, false); }, POLL_MS);
    } else if (watched) {
      window.setTimeout(function () { poll(watched, seq, 0, true); }, WATCH_MS);
    }
  }
  document.body.setAttribute("data-ready", "true");
})();
