/* Pretraining, Measured: the English <-> 中文 switch lands on the section the reader is in.
   The switch (book/_ext/course_editions.py) carries data-sections, a map from this page's section
   ids to its twin's (the label ids: sec-01-mfu <-> zh-sec-01-mfu; title slugs differ between the editions). Offline, no
   network; without JavaScript the link opens the twin's top. The page's search boxes also send its
   edition, so each edition's search lists its own pages first (course_search.js). */
(function () {
  "use strict";
  // A labelled section: <section id="title-slug"><span id="sec-01-mfu"></span><h2>...
  function mapped(el, map) {
    if (el.id && map[el.id]) { return map[el.id]; }
    for (var i = 0; i < el.children.length; i++) {
      var c = el.children[i];
      if (c.tagName === "SPAN" && c.id && map[c.id]) { return map[c.id]; }
    }
    return null;
  }
  function currentSection(map) {
    var el = location.hash ? document.getElementById(decodeURIComponent(location.hash.slice(1))) : null;
    if (!el) {   // the last labelled section whose top is above the top fifth of the window
      var best = null;
      document.querySelectorAll("section").forEach(function (s) {
        if (mapped(s, map) && s.getBoundingClientRect().top <= window.innerHeight / 5) { best = s; }
      });
      el = best;
    }
    for (; el; el = el.parentElement) {
      var target = mapped(el, map);
      if (target) { return target; }
    }
    return null;
  }
  function wire(link) {
    var map = {};
    try { map = JSON.parse(link.getAttribute("data-sections") || "{}"); } catch (e) { map = {}; }
    var base = link.getAttribute("href").split("#")[0];
    function update() {
      var target = currentSection(map);
      link.setAttribute("href", target ? base + "#" + target : base);
    }
    link.addEventListener("click", update);
    link.addEventListener("mouseenter", update);
    link.addEventListener("focus", update);
  }
  /* The edition this page belongs to (its switch says; the search page, which has none, keeps the
   * one it was searched from): every search box sends it, so course_search.js lists that edition's
   * sections first. A Chinese page's box also asks for its query in Chinese. */
  function edition() {
    var sw = document.querySelector(".course-lang-switch[data-edition]");
    if (sw) { return sw.getAttribute("data-edition"); }
    var m = /[?&]edition=(zh|en)(?:&|$)/.exec(location.search);
    return m ? m[1] : null;
  }
  function tagSearchBoxes(ed) {
    document.querySelectorAll("form").forEach(function (form) {
      if (!/(^|\/)search\.html$/.test(form.getAttribute("action") || "")) { return; }
      var field = form.querySelector("input[name=edition]");
      if (!field) {
        field = document.createElement("input");
        field.type = "hidden";
        field.name = "edition";
        form.appendChild(field);
      }
      field.value = ed;
      if (ed === "zh") {
        form.querySelectorAll("input[name=q]").forEach(function (q) {
          q.setAttribute("placeholder", "搜索本书……");
          q.setAttribute("aria-label", "搜索本书……");
        });
      }
    });
  }
  function init() {
    document.querySelectorAll("a.course-lang-twin").forEach(wire);
    var ed = edition();
    if (ed) { tagSearchBoxes(ed); }
  }
  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); } else { init(); }
})();
