// kvmath book: before printing (Ctrl+P, or `make pdf`), open every hidden code
// cell and solution, so the printout holds what the page holds.
(function () {
  function openAll() {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
    document.querySelectorAll(".toggle-hidden").forEach(function (e) { e.classList.remove("toggle-hidden"); });
  }
  window.addEventListener("beforeprint", openAll);
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
