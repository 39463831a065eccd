/* A visible cue on every table or figure that scrolls sideways (issue #43): a box that is wider than
   its column scrolls inside itself, and a scrollbar alone (hidden until touched on phones and on
   overlay-scrollbar systems) does not say there is more. Each such box in the article gets
   data-course-scrolls="more" while columns are hidden to its right ("end" once scrolled to the end),
   and a line before it, "scroll sideways for more →", hidden once the reader has scrolled to the
   end. Loaded by book/_ext/course_figures.py; without JavaScript the boxes still scroll. */
(function () {
  "use strict";
  var SCROLLERS = ".bd-article .pst-scrollable-table-container, .bd-article div.cell_output, " +
                  ".bd-article .output, .bd-article figure.course-wide-figure, " +
                  ".bd-article figure.course-wide-figure > *";
  var zh = (document.documentElement.lang || "").indexOf("zh") === 0;
  var TEXT = zh ? "左右滑动查看更多 →" : "scroll sideways for more →";

  function scrolls(e) {
    var ox = getComputedStyle(e).overflowX;
    return (ox === "auto" || ox === "scroll") && e.scrollWidth > e.clientWidth + 1 &&
           e.querySelector("table, img") !== null;
  }

  function cueFor(e, make) {
    var prev = e.previousElementSibling;
    if (prev && prev.classList.contains("course-scroll-cue")) return prev;
    if (!make) return null;
    var cue = document.createElement("p");
    cue.className = "course-scroll-cue";
    cue.setAttribute("aria-hidden", "true");   // the content itself is all there for a screen reader
    cue.textContent = TEXT;
    e.parentNode.insertBefore(cue, e);
    return cue;
  }

  function mark(e) {
    var inner = e.querySelector("[data-course-scrolls]");
    var more = false;
    if (inner && inner !== e) {                  // the innermost scrolling box carries the cue
      e.removeAttribute("data-course-scrolls");
    } else if (scrolls(e)) {
      more = e.scrollLeft + e.clientWidth < e.scrollWidth - 2;
      e.setAttribute("data-course-scrolls", more ? "more" : "end");
    } else {
      e.removeAttribute("data-course-scrolls");
    }
    var cue = cueFor(e, more);
    if (cue) cue.hidden = !more;
  }

  function update() {
    var boxes = Array.prototype.slice.call(document.querySelectorAll(SCROLLERS));
    boxes.reverse().forEach(mark);               // inner boxes first (document order reversed)
  }

  function start() {
    update();
    var boxes = document.querySelectorAll(SCROLLERS);
    boxes.forEach(function (e) {
      e.addEventListener("scroll", function () { mark(e); }, {passive: true});
    });
    window.addEventListener("resize", update);
    window.addEventListener("load", update);     // images decoded: their widths are final
    // A box's width also changes after the window's "resize" has been handled: widening a phone's
    // window to a desktop's brings the theme's sidebar in, which narrows the article once the event
    // is over, and a table that then overflowed had no cue. Each box's own size change is heard
    // (marked in the next frame, so that a cue shown or hidden never re-enters the observer).
    if ("ResizeObserver" in window) {
      var pending = false;
      var observer = new ResizeObserver(function () {
        if (pending) return;
        pending = true;
        requestAnimationFrame(function () { pending = false; update(); });
      });
      boxes.forEach(function (e) { observer.observe(e); });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
