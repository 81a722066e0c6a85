// share-worker dashboard: refreshes the parts marked data-refresh, and ticks "select all".
// Plain JavaScript, no build step, no third-party code.
(function () {
  "use strict";
  function refresh(el) {
    var url = el.getAttribute("data-refresh");
    var every = parseInt(el.getAttribute("data-every") || "5000", 10);
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) {
          el.innerHTML = html;
          el.setAttribute("data-refreshed", String(Date.now()));
          if (el.querySelector("[data-final]")) { return; }
          setTimeout(tick, every);
        })
        .catch(function () { setTimeout(tick, every); });
    }
    setTimeout(tick, every);
  }
  document.querySelectorAll("[data-refresh]").forEach(refresh);
  document.querySelectorAll("input[data-select-all]").forEach(function (box) {
    box.addEventListener("change", function () {
      document.querySelectorAll("input[name=letter]").forEach(function (b) { b.checked = box.checked; });
    });
  });
})();
