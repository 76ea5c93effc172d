/* The run page: lays out the task graph with dagre and shows the selected task.
   Builds every element with createElementNS/textContent: no text is ever parsed as HTML. */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("graph-data").textContent);
  var svg = document.getElementById("graph");
  var nodes = {};
  var edges = [];
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
      group.addEventListener("click", function () { select(String(n.index), true); });
      group.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); select(String(n.index), true); }
      });
      nodes[String(n.index)] = group;
    });
    var size = g.graph();
    natural = { width: Math.ceil(size.width || 0), height: Math.ceil(size.height || 0) };
    svg.setAttribute("viewBox", "0 0 " + natural.width + " " + natural.height);
    zoom(1);
  }

  /* The graph is drawn at `scale` times its laid-out size (the viewBox keeps its shape). */
  var natural = { width: 0, height: 0 };
  var scale = 1;
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
    document.querySelectorAll("article.detail").forEach(function (a) { a.hidden = a !== panel; });
    document.querySelectorAll("button.pick").forEach(function (b) {
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

  draw();
  fit();
  tool("zoom-fit", fit);
  tool("zoom-in", function () { zoom(scale * 1.25); });
  tool("zoom-out", function () { zoom(scale / 1.25); });
  document.querySelectorAll("button.pick").forEach(function (b) {
    b.addEventListener("click", function () { select(b.getAttribute("data-task"), true); });
  });
  var wanted = window.location.hash.replace(/^#task-/, "");
  if (document.getElementById("task-" + wanted)) {
    select(wanted);
  } else if (data.nodes.length) {
    select(String(data.nodes[0].index));
  } else if (document.getElementById("task-coordinator")) {
    select("coordinator");
  }
  document.body.setAttribute("data-ready", "true");
})();
