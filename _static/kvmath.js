// kvmath book: before printing (Ctrl+P, or `make pdf`), open every hidden code
// cell and solution, so the printout holds what the page holds; after it, close again
// what printing opened, so the reader's page is as it was.
(function () {
  var reopened = [];  // how to put back each thing openAll opened
  function openAll() {
    document.querySelectorAll("details:not([open])").forEach(function (d) {
      d.open = true;
      reopened.push(function () { d.open = false; });
    });
    document.querySelectorAll(".toggle-hidden").forEach(function (e) {
      e.classList.remove("toggle-hidden");
      reopened.push(function () { e.classList.add("toggle-hidden"); });
    });
  }
  function closeAgain() {
    var undo = reopened;
    reopened = [];
    undo.forEach(function (f) { f(); });
  }
  window.addEventListener("beforeprint", openAll);
  window.addEventListener("afterprint", closeAgain);
  window.kvmathOpenAll = openAll;
})();

// The footer's link to the book's own source (kvmath-source.tar.gz, at the site's
// root): the footer is the same HTML on every page, so point it at the root from here.
// (the script loads in the page's head, before the footer exists)
document.addEventListener("DOMContentLoaded", function () {
  var root = document.documentElement.dataset.content_root;
  if (root === undefined) return;
  document.querySelectorAll("a.kvmath-source").forEach(function (a) { a.href = root + "kvmath-source.tar.gz"; });
});

// Boxes that scroll sideways (a display equation longer than a phone's column, a wide table)
// say so: the box gets kvmath-more-left / kvmath-more-right while there is more of it beyond that
// edge, and kvmath.css draws a shadow inside that edge. A box that fits is left alone.
(function () {
  var BOXES = "article div.math, article mjx-container[display='true'], article table.kvmath-table, " +
              "article .pst-scrollable-table-container";

  function mark(box) {
    var more = box.scrollWidth - box.clientWidth;
    box.classList.toggle("kvmath-more-left", more > 1 && box.scrollLeft > 1);
    box.classList.toggle("kvmath-more-right", more > 1 && box.scrollLeft < more - 1);
  }

  function markAll() {
    document.querySelectorAll(BOXES).forEach(function (box) {
      if (!box.kvmathScroll) {
        box.kvmathScroll = true;
        box.addEventListener("scroll", function () { mark(box); }, {passive: true});
      }
      mark(box);
    });
  }

  // equations take their width once MathJax has typeset them (its script is deferred)
  window.addEventListener("load", function () {
    markAll();
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(markAll);
  });
  window.addEventListener("resize", markAll);
})();

// Figures on a phone. The book's figures are laid out at 100 CSS px per inch (a 7 in figure is
// 700 px wide, kvbook.plots.CSS_DPI) and shrink with the column: on a 390 px phone to about half,
// their 8 pt legends to 5.5 px. Where the screen is narrower than a figure's own width, a
// "Tap to enlarge" button under it (and a tap on the figure) opens the figure in a full-screen
// layer at that width, or wider where its smallest text would still be under 9 CSS px (each
// figure PNG records its smallest text, kvbook.plots.MIN_TEXT_KEY); the layer pans sideways
// inside itself, never the page. An interactive figure (kvbook.interactive, .kvmath-interactive)
// moves there whole, with its controls, and stays live: the live layer (kvbook/live/live.js)
// keeps its elements wherever they are. Escape, the close button or the browser's back button
// puts it back. Nothing of this shows where the figure fits, or in print.
(function () {
  var MIN_CSS_PX = 9;
  var shown = null;  // the figure shown full size: {layer, block, placeholder, trigger, inert}
  var opening = false;

  function image(block) {
    return block.matches("img") ? block : block.querySelector(".kvmath-interactive-img");
  }

  function cssWidth(block) {
    // the width the figure is laid out at, CSS px: the img's width attribute (interactive
    // figures), the width the build set (HiDPI PNGs, book_pages.py), else its own pixels
    var img = image(block);
    if (!img) return 0;
    var attr = Number(img.getAttribute("width"));
    if (attr) return attr;
    var styled = parseFloat(img.style.width);
    if (img.style.width.slice(-2) === "px" && styled) return styled;
    return img.naturalWidth || 0;
  }

  function minTextPx(src) {
    // the PNG's kvbook:min-text-px (a tEXt chunk), image pixels; null where it has none. The
    // image is in the browser's cache already.
    return fetch(src).then(function (r) { return r.arrayBuffer(); }).then(function (buf) {
      var bytes = new Uint8Array(buf), view = new DataView(buf), at = 8;
      while (at + 8 <= bytes.length) {
        var size = view.getUint32(at), type = String.fromCharCode.apply(null, bytes.subarray(at + 4, at + 8));
        if (type === "IDAT" || type === "IEND") break;
        if (type === "tEXt") {
          var text = String.fromCharCode.apply(null, bytes.subarray(at + 8, at + 8 + size));
          var cut = text.indexOf("\0");
          if (text.slice(0, cut) === "kvbook:min-text-px") return Number(text.slice(cut + 1)) || null;
        }
        at += 12 + size;
      }
      return null;
    }).catch(function () { return null; });
  }

  function figures() {
    var out = [];
    document.querySelectorAll("article .kvmath-interactive").forEach(function (b) { out.push(b); });
    document.querySelectorAll("article figure img, article .cell_output img").forEach(function (img) {
      if (!img.closest(".kvmath-interactive")) out.push(img);
    });
    return out;
  }

  function label(block) {
    var fig = block.closest("figure");
    var number = fig && fig.querySelector(".caption-number");
    return number ? number.textContent.trim() : "Figure";
  }

  function update() {
    var screen = document.documentElement.clientWidth;
    figures().forEach(function (block) {
      var narrow = screen < cssWidth(block) - 1;
      if (block.kvmathEnlarge) block.kvmathEnlarge.hidden = !narrow;
      var img = image(block);
      if (img) img.classList.toggle("kvmath-zoomable", narrow);
    });
  }

  function attach(block) {
    if (block.kvmathEnlarge) return;
    var img = image(block);
    var button = document.createElement("button");
    button.type = "button";
    button.className = "kvmath-enlarge";
    button.hidden = true;
    button.textContent = "Tap to enlarge";
    button.setAttribute("aria-label", "Enlarge " + label(block) + " to its full size");
    button.addEventListener("click", function () { open(block, button); });
    block.kvmathEnlarge = button;
    if (img) block.kvmathBuiltSrc = img.getAttribute("src");
    // under the image: a static figure's image sits in a link to its file (Sphinx)
    (block.matches("img") ? block.closest("a.image-reference") || block : img || block).after(button);
    if (!img) return;
    img.addEventListener("click", function (e) {
      if (button.hidden || shown) return;  // the figure fits, or is shown full size already
      e.preventDefault();
      open(block, button);
    });
    if (!img.complete) img.addEventListener("load", update, {once: true});
  }

  function smallestText(block, img) {
    // the frame shown now records its smallest text; a frame the page's live layer drew
    // (kvbook/live/live.js) records none, and the figure's text is the same size as in the
    // frame the book was built with (attach kept its address)
    var now = img.currentSrc || img.src;
    return minTextPx(now).then(function (px) {
      if (px || !block.kvmathBuiltSrc || block.kvmathBuiltSrc === now) return px;
      return minTextPx(block.kvmathBuiltSrc);
    });
  }

  function open(block, trigger) {
    if (shown || opening) return;
    opening = true;
    var img = image(block);
    smallestText(block, img).then(function (px) {
      opening = false;
      var width = cssWidth(block);
      // wider than its own width where its smallest text needs it (at most twice: the PNG's pixels)
      if (px && img.naturalWidth) width *= Math.min(2, Math.max(1, MIN_CSS_PX / (px * width / img.naturalWidth)));
      show(block, trigger, Math.ceil(width));
    });
  }

  function show(block, trigger, width) {
    var layer = document.createElement("div");
    layer.className = "kvmath-zoom";
    layer.setAttribute("role", "dialog");
    layer.setAttribute("aria-modal", "true");
    layer.setAttribute("aria-label", label(block) + " at full size");
    var bar = document.createElement("div");
    bar.className = "kvmath-zoom-bar";
    var title = document.createElement("span");
    title.textContent = label(block) + " at full size: drag it sideways";
    var close = document.createElement("button");
    close.type = "button";
    close.className = "kvmath-zoom-close";
    close.textContent = "Close \u2715";
    close.addEventListener("click", dismiss);
    bar.appendChild(title);
    bar.appendChild(close);
    var body = document.createElement("div");
    body.className = "kvmath-zoom-body";
    var placeholder = null;
    if (block.matches("img")) {
      var copy = block.cloneNode(false);
      copy.className = "kvmath-zoom-img";
      copy.style.width = width + "px";
      body.appendChild(copy);
    } else {
      // the block itself, with its controls; a placeholder keeps its height in the page
      placeholder = document.createElement("div");
      placeholder.className = "kvmath-zoom-placeholder";
      placeholder.style.height = block.getBoundingClientRect().height + "px";
      block.before(placeholder);
      block.style.width = width + "px";
      body.appendChild(block);
    }
    layer.appendChild(bar);
    layer.appendChild(body);
    // the page behind is out of reach (focus, screen readers) and does not scroll
    var inert = Array.prototype.filter.call(document.body.children, function (e) { return !e.inert; });
    inert.forEach(function (e) { e.inert = true; });
    document.body.appendChild(layer);
    document.documentElement.classList.add("kvmath-zoom-open");
    shown = {layer: layer, block: block, placeholder: placeholder, trigger: trigger, inert: inert};
    history.pushState({kvmathZoom: true}, "");
    close.focus({preventScroll: true});
  }

  function restore() {
    // put everything back as it was (after the back button, Escape or the close button)
    if (!shown) return;
    var s = shown;
    shown = null;
    if (s.placeholder) {
      s.block.style.width = "";
      s.placeholder.replaceWith(s.block);
    }
    s.layer.remove();
    s.inert.forEach(function (e) { e.inert = false; });
    document.documentElement.classList.remove("kvmath-zoom-open");
    if (s.trigger && !s.trigger.hidden) s.trigger.focus({preventScroll: true});
  }

  function dismiss() {
    if (!shown) return;
    if (history.state && history.state.kvmathZoom) history.back();  // popstate restores
    else restore();
  }

  window.addEventListener("popstate", restore);
  window.addEventListener("beforeprint", function () {
    // the page prints as it is laid out in it: put the figure back now, and drop the
    // history entry the full-size view pushed (its popstate finds nothing left to restore)
    if (!shown) return;
    var ours = history.state && history.state.kvmathZoom;
    restore();
    if (ours) history.back();
  });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape" && shown) dismiss(); });
  window.addEventListener("resize", update);
  document.addEventListener("DOMContentLoaded", function () {
    figures().forEach(attach);
    update();
  });
})();
