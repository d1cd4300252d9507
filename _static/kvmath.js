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
